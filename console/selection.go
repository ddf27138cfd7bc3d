package console

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/replay"
	"github.com/runledger-go/runledger/requeue"
)

// selection is a bulk action as the library's request: exactly one of
// replay and requeue is set.
type selection struct {
	kind    string
	scope   runledger.Scope
	replay  *replay.BulkRequest
	requeue *requeue.BulkRequest
}

// selection maps the job list's filter onto a bulk request. A bulk action
// acts in one tenant: the console's scope or, unscoped, the Organization
// filter, which must then be set. Bulk replay takes SUCCEEDED jobs of one
// type; bulk requeue takes DEAD_LETTERED or CANCELED jobs.
func (c *console) selection(kind string, f filter, operator string, v bulkView) (selection, error) {
	if f.scope == nil {
		return selection{}, formError(`A bulk action acts in one tenant: set the Organization filter (an organization's id, or "global").`)
	}
	s := selection{kind: kind, scope: *f.scope}
	switch kind {
	case kindReplay:
		if f.status != nil && *f.status != runledger.JobStatusSucceeded {
			return selection{}, formError("Bulk replay replays SUCCEEDED jobs: set Status to SUCCEEDED or leave it blank.")
		}
		if f.Type == "" {
			return selection{}, formError("Bulk replay needs a job type: set the Type filter.")
		}
		if f.ErrorCode != "" {
			return selection{}, formError("Bulk replay selects by type and finish time only: clear the Error code filter.")
		}
		s.replay = &replay.BulkRequest{Scope: s.scope, Key: v.Key, Reason: v.Reason, Operator: operator, ChunkSize: c.opts.BulkChunk,
			Filter: &replay.Filter{JobType: f.Type, SucceededSince: f.since, SucceededUntil: f.until}}
	case kindRequeue:
		if f.status == nil || (*f.status != runledger.JobStatusDeadLettered && *f.status != runledger.JobStatusCanceled) {
			return selection{}, formError("Bulk requeue requeues DEAD_LETTERED or CANCELED jobs: set Status to one of them.")
		}
		policy := requeue.PreserveProgress
		if v.Reset {
			policy = requeue.ResetProgress
		}
		s.requeue = &requeue.BulkRequest{Scope: s.scope, Reason: v.Reason, StatePolicy: policy, Operator: operator, ChunkSize: c.opts.BulkChunk,
			Filter: &requeue.Filter{Status: requeue.Status(*f.status), JobType: f.Type, ErrorCode: f.ErrorCode,
				FinishedSince: f.since, FinishedUntil: f.until}}
	}
	return s, nil
}

// withUntil is s with its finish bound pinned.
func (s selection) withUntil(t time.Time) selection {
	if s.replay != nil {
		r, fl := *s.replay, *s.replay.Filter
		fl.SucceededUntil, r.Filter = &t, &fl
		s.replay = &r
	}
	if s.requeue != nil {
		r, fl := *s.requeue, *s.requeue.Filter
		fl.FinishedUntil, r.Filter = &t, &fl
		s.requeue = &r
	}
	return s
}

// count is the dry run: how many jobs the selection holds now (validating
// the request first). Nothing is written.
func (s selection) count(ctx context.Context, pool *pgxpool.Pool) (int, error) {
	if s.replay != nil {
		return replay.BulkCount(ctx, pool, *s.replay)
	}
	return requeue.BulkCount(ctx, pool, *s.requeue)
}

// tally is a run's running totals.
type tally struct {
	expected, done, ok, refused int
}

// run runs the action to its end, reporting the totals after each chunk.
func (s selection) run(ctx context.Context, pool *pgxpool.Pool, report func(tally)) error {
	if s.replay != nil {
		req := *s.replay
		req.Count = true
		_, err := replay.Bulk(ctx, pool, req, func(ch replay.BulkChunk) error {
			t := ch.Total
			report(tally{expected: ch.Expected, done: t.Selected, ok: t.Inserted + t.Existing, refused: t.Refused()})
			return nil
		})
		return err
	}
	req := *s.requeue
	req.Count = true
	_, err := requeue.Bulk(ctx, pool, req, func(ch requeue.BulkChunk) error {
		t := ch.Total
		report(tally{expected: ch.Expected, done: t.Selected, ok: t.Requeued + t.Existing, refused: t.Selected - t.Requeued - t.Existing})
		return nil
	})
	return err
}

// formError is a message for the operator about the form, shown as it is
// (a sentence, capitalized and punctuated).
type formError string

func (e formError) Error() string { return string(e) }
