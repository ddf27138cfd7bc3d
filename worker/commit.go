package worker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/inspect"
	"github.com/runledger-go/runledger/lease"
)

// Outcome is what became of one attempt.
type Outcome string

// The outcomes Finished reports.
const (
	// OutcomeSucceeded: the job completed with the handler's output.
	OutcomeSucceeded Outcome = "succeeded"
	// OutcomeRetried: the attempt failed and the job is due again.
	OutcomeRetried Outcome = "retried"
	// OutcomeDeadLettered: the attempt failed and the job is
	// dead-lettered (terminal, panicked, or no attempts left).
	OutcomeDeadLettered Outcome = "dead_lettered"
	// OutcomeLost: the worker no longer held the lease (the job was
	// canceled, or the lease expired and another attempt may run); nothing
	// was written for the attempt. Also an attempt whose outcome could not
	// be written before the hard stop of a shutdown (see ShutdownGrace):
	// its job stays LEASED until a recovery takes it back, unless a write
	// whose reply was lost landed.
	OutcomeLost Outcome = "lost"
	// OutcomeHandedBack: the shutdown canceled the running handler and the
	// attempt was handed back without spending it (lease.Release): the job
	// is PENDING again, due as it was, at the attempt before.
	OutcomeHandedBack Outcome = "handed_back"
)

// Finished is what Config.OnFinished hears of an attempt, after its
// outcome was committed.
type Finished struct {
	// Job is the job as stored after the outcome; for OutcomeLost, as it
	// was claimed.
	Job     runledger.Job
	Outcome Outcome
	// Kind is the failure kind of a failed attempt; "" on success or loss.
	Kind runledger.FailureKind
	// Err is the handler's error (or panic, or why the lease was lost);
	// nil on success.
	Err error
	// Duration is how long the handler ran.
	Duration time.Duration
}

// commit records the attempts' outcomes as they come, in batches (what
// arrived while the previous batch was being written, up to 1,000), until
// drain is closed and nothing is left.
func (r *run) commit() {
	for {
		var batch []*execution
		select {
		case e := <-r.outcomes:
			batch = append(batch, e)
		case <-r.drain:
			// Shutting down: whatever is left, then stop.
			for {
				select {
				case e := <-r.outcomes:
					batch = append(batch, e)
					if len(batch) == maxClaim {
						r.flush(batch)
						batch = nil
					}
					continue
				default:
				}
				break
			}
			if len(batch) > 0 {
				r.flush(batch)
			}
			return
		}
	more:
		for len(batch) < maxClaim {
			select {
			case e := <-r.outcomes:
				batch = append(batch, e)
			default:
				break more
			}
		}
		r.flush(batch)
	}
}

// flush writes one batch of outcomes (completions in one statement,
// failures in another, hand-backs of attempts the shutdown canceled in a
// third), retrying what failed for reasons that may pass while the leases
// last, then reports each. Each statement's entries are sorted by tenant,
// then job id (byLease): the order in which the statements lock their
// rows, so that the worker's writes (these, its heartbeats and its
// releases, each sorted the same way) never deadlock with each other.
func (r *run) flush(batch []*execution) {
	var done, failed, back []*execution
	for _, e := range batch {
		switch {
		case e.lost.Load():
			r.finish(e, Finished{Job: e.job, Outcome: OutcomeLost, Err: errLeaseLost, Duration: e.duration})
		case e.handBack:
			back = append(back, e)
		case e.failure == nil:
			done = append(done, e)
		default:
			failed = append(failed, e)
		}
	}
	sortByLease(done)
	sortByLease(failed)
	sortByLease(back)
	if len(done) > 0 {
		r.write(done, r.completeOp, r.completionRefused, nil)
	}
	if len(failed) > 0 {
		r.write(failed, r.failOp, r.failureRefused, nil)
	}
	if len(back) > 0 {
		r.write(back, r.releaseOp, r.giveUpRefused, nil)
	}
}

// batchOp writes one batch of outcomes.
type batchOp func(context.Context, []*execution) ([]lease.Result[runledger.Job], error)

func (r *run) completeOp(ctx context.Context, es []*execution) ([]lease.Result[runledger.Job], error) {
	reqs := make([]lease.CompleteRequest, len(es))
	for i, e := range es {
		e.mu.Lock()
		reqs[i] = lease.CompleteRequest{Scope: &e.scope, JobID: e.job.ID, RunNumber: e.job.RunNumber, Attempt: e.job.Attempt,
			WorkerID: r.cfg.WorkerID, Output: e.output, ProgressDone: e.progressDone, ProgressTotal: e.progressTotal}
		e.mu.Unlock()
	}
	return lease.CompleteMany(ctx, r.pool, reqs)
}

func (r *run) failOp(ctx context.Context, es []*execution) ([]lease.Result[runledger.Job], error) {
	reqs := make([]lease.FailRequest, len(es))
	for i, e := range es {
		f := *e.failure
		f.Scope, f.JobID, f.RunNumber, f.Attempt, f.WorkerID = &e.scope, e.job.ID, e.job.RunNumber, e.job.Attempt, r.cfg.WorkerID
		reqs[i] = f
	}
	return lease.FailMany(ctx, r.pool, reqs)
}

func (r *run) releaseOp(ctx context.Context, es []*execution) ([]lease.Result[runledger.Job], error) {
	reqs := make([]lease.ReleaseRequest, len(es))
	for i, e := range es {
		reqs[i] = lease.ReleaseRequest{Scope: &e.scope, JobID: e.job.ID, RunNumber: e.job.RunNumber, Attempt: e.job.Attempt, WorkerID: r.cfg.WorkerID}
	}
	return lease.Release(ctx, r.pool, reqs)
}

// completionRefused handles a completion the database refused on its own
// (its output, although it passed the library's validation): a refusal of
// the value fails the attempt terminally as CodeOutputInvalid instead;
// any other refusal gives the attempt up.
func (r *run) completionRefused(e *execution, err error) {
	if !valueRefused(err) {
		r.giveUpRefused(e, err)
		return
	}
	e.output, e.failure, e.err = nil, outputInvalid("the database refused the handler's output", err), errors.Join(e.err, err)
	r.write([]*execution{e}, r.failOp, r.failureRefused, nil)
}

// failureRefused handles a failure the database refused on its own: it is
// written once more with its code and message reduced to printable ASCII;
// refused again, the attempt is given up.
func (r *run) failureRefused(e *execution, err error) {
	if e.rewritten || !valueRefused(err) {
		r.giveUpRefused(e, err)
		return
	}
	e.rewritten = true
	f := *e.failure
	f.ErrorCode, f.ErrorMessage = printable(f.ErrorCode), printable(f.ErrorMessage)
	if f.ErrorCode == "" {
		f.ErrorCode = CodeHandlerFailed
	}
	e.failure = &f
	r.write([]*execution{e}, r.failOp, r.failureRefused, nil)
}

// giveUpRefused reports an attempt whose outcome the database refused as
// lost: its lease is no longer renewed, so a recovery takes the job back
// once it expires, and nothing more is tried for it.
func (r *run) giveUpRefused(e *execution, err error) {
	r.log.Error("runledger worker: the database refused an attempt's outcome; its job is recovered when its lease expires",
		"worker", r.fp, "job_id", e.job.ID, "job_type", e.job.JobType, "attempt", e.job.Attempt, "err", err)
	e.lost.Store(true)
	r.finish(e, Finished{Job: e.job, Outcome: OutcomeLost, Err: err, Duration: e.duration})
}

// write runs a batch write until every entry is settled: written, or
// refused (the lease is not held: lost). A failure that wrote nothing
// (transient) is retried; one whose outcome is unknown is resolved by
// reading the jobs back, and only what did not land is retried. A retry
// refused for an entry whose earlier write was unconfirmed is read back
// too: the refusal may be that write, landed. An entry whose lease ran out
// meanwhile is lost. Each try is bounded by the end of the batch's last
// lease (past it every entry is lost anyway); at the hard stop of a
// shutdown what is left is given up.
//
// A batch the database refuses as a whole (an error that is neither
// transient nor an unknown outcome: the server answered, nothing was
// written) is split in halves, each written on its own, down to single
// entries, so that one bad entry never holds up the others; a single entry
// refused on its own goes to alone, which never retries it unchanged.
func (r *run) write(es []*execution, op batchOp, alone func(*execution, error), unsure map[*execution]bool) {
	var bo backoff
	for len(es) > 0 {
		ctx, cancel := r.bounded(lastLeaseEnd(es))
		results, err := op(ctx, es)
		cancel()
		switch {
		case err == nil:
			var recheck []*execution
			for i, res := range results {
				if res.Err != nil && unsure[es[i]] {
					recheck = append(recheck, es[i])
					continue
				}
				r.report(es[i], res.Value, res.Err)
			}
			if len(recheck) == 0 {
				return
			}
			unread, held := r.resolve(recheck)
			es = append(unread, held...)
		case batchRefused(err) && r.db.Err() == nil:
			if len(es) == 1 {
				alone(es[0], err)
				return
			}
			r.log.Warn("runledger worker: the database refused a batch of outcomes; writing its halves apart",
				"worker", r.fp, "jobs", len(es), "err", err)
			half := len(es) / 2
			r.write(es[:half], op, alone, unsure)
			r.write(es[half:], op, alone, unsure)
			return
		default:
			r.log.Warn("runledger worker: recording outcomes failed; retrying", "worker", r.fp, "jobs", len(es), "err", err)
			if errors.Is(err, runledger.ErrCommitUnconfirmed) {
				if unsure == nil {
					unsure = map[*execution]bool{}
				}
				for _, e := range es {
					unsure[e] = true
				}
				unread, held := r.resolve(es)
				es = append(unread, held...)
			}
		}
		var left, late []*execution
		for _, e := range es {
			switch {
			case !e.lost.Load() && time.Now().After(e.leaseEnd()) && unsure[e]:
				late = append(late, e)
			case e.lost.Load() || time.Now().After(e.leaseEnd()):
				e.lost.Store(true)
				r.finish(e, Finished{Job: e.job, Outcome: OutcomeLost, Err: errLeaseLost, Duration: e.duration})
			default:
				left = append(left, e)
			}
		}
		r.resolveLate(late)
		es = left
		if len(es) > 0 && (r.db.Err() != nil || !sleep(r.db.Done(), bo.next())) {
			r.giveUp(es)
			return
		}
	}
}

// batchRefused reports an error by which the database refused a write
// outright: it answered with an error (or the library refused the
// request), so nothing was written, and sending the same batch again
// would be refused again. Lost connections, transient states and unknown
// outcomes are not refusals.
func batchRefused(err error) bool {
	if errors.Is(err, runledger.ErrCommitUnconfirmed) || runledger.IsTransient(err) ||
		errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var re *runledger.Error
	if !errors.As(err, &re) {
		return false
	}
	return re.Category == runledger.CategoryValidation || re.SQLState != ""
}

// valueRefused reports a refusal of a value the write carried: the
// library's validation, or a data exception (SQLSTATE class 22), a check
// constraint (23514) or a program limit (54) of the server.
func valueRefused(err error) bool {
	var re *runledger.Error
	if !errors.As(err, &re) {
		return false
	}
	return re.Category == runledger.CategoryValidation ||
		strings.HasPrefix(re.SQLState, "22") || re.SQLState == "23514" || strings.HasPrefix(re.SQLState, "54")
}

// printable keeps the printable ASCII of s, bounded as a stored message.
func printable(s string) string {
	b := make([]byte, 0, min(len(s), maxErrorMessage))
	for i := 0; i < len(s) && len(b) < maxErrorMessage; i++ {
		if c := s[i]; c >= 0x20 && c < 0x7f {
			b = append(b, c)
		}
	}
	return string(b)
}

// sortByLease sorts a batch by tenant, then job id: the one order in
// which the worker's multi-row writes lock their rows.
func sortByLease(es []*execution) {
	slices.SortFunc(es, func(a, b *execution) int { return compareLease(a.job, b.job) })
}

// compareLease orders jobs by tenant (organization_id, the global tenant
// first), then id.
func compareLease(a, b runledger.Job) int {
	ta, tb := tenantOf(a), tenantOf(b)
	if c := bytes.Compare(ta[:], tb[:]); c != 0 {
		return c
	}
	return bytes.Compare(a.ID[:], b.ID[:])
}

func tenantOf(j runledger.Job) uuid.UUID {
	if j.OrganizationID == nil {
		return uuid.Nil
	}
	return *j.OrganizationID
}

// giveUp reports as lost the attempts whose outcome could not be written
// before the hard stop of a shutdown: their jobs stay LEASED until their
// leases expire and a recovery takes them back (or an unconfirmed write
// landed after all).
func (r *run) giveUp(es []*execution) {
	r.log.Error("runledger worker: the shutdown's time ran out before these outcomes could be written; their jobs are recovered when their leases expire",
		"worker", r.fp, "jobs", len(es))
	for _, e := range es {
		e.lost.Store(true)
		r.finish(e, Finished{Job: e.job, Outcome: OutcomeLost, Err: errShutdownDeadline, Duration: e.duration})
	}
}

// lastLeaseEnd is the latest lease end among es.
func lastLeaseEnd(es []*execution) time.Time {
	var until time.Time
	for _, e := range es {
		if t := e.leaseEnd(); t.After(until) {
			until = t
		}
	}
	return until
}

// resolveLate settles attempts whose write is unconfirmed and whose lease
// has run out: the write may have landed, so they are read back before
// any is reported lost. A job that cannot be read (the database cannot be
// reached) is read again until it can be, however long the outage lasts,
// or until the hard stop of a shutdown: reporting lost an outcome that
// landed would tell OnFinished the attempt wrote nothing when it wrote its
// outcome. A job read back still leased by this worker at the attempt (its
// write did not land, and no recovery took it back yet) is read again for
// at most a lease length, then reported lost, as nothing more may be
// written for it. One that shows its write is reported written; any other
// is lost.
func (r *run) resolveLate(es []*execution) {
	var bo backoff
	heldUntil := time.Now().Add(r.cfg.Lease)
	for len(es) > 0 {
		unread, held := r.resolve(es)
		es = unread
		for _, e := range held {
			if time.Now().Before(heldUntil) {
				es = append(es, e)
				continue
			}
			e.lost.Store(true)
			r.finish(e, Finished{Job: e.job, Outcome: OutcomeLost, Err: errLeaseLost, Duration: e.duration})
		}
		if len(es) > 0 && (r.db.Err() != nil || !sleep(r.db.Done(), bo.next())) {
			for _, e := range es {
				e.lost.Store(true)
				r.finish(e, Finished{Job: e.job, Outcome: OutcomeLost, Err: errShutdownDeadline, Duration: e.duration})
			}
			return
		}
	}
}

// resolve reads back the jobs of a batch whose commit is unconfirmed:
// those that show this worker's write at this attempt are reported
// written; those that could not be read (the database could not be
// reached) are returned as unread, and those still leased at this attempt
// by this worker as held, to be written or read again; the others
// (recovered, canceled, claimed again, or a read the database refused)
// are reported lost. The reads share one deadline: the batch's last lease
// end, at least a heartbeat interval from now.
func (r *run) resolve(es []*execution) (unread, held []*execution) {
	until := lastLeaseEnd(es)
	// A read-back may still find what landed, also past a lease's end.
	if floor := time.Now().Add(r.cfg.HeartbeatInterval); until.Before(floor) {
		until = floor
	}
	ctx, cancel := r.bounded(until)
	defer cancel()
	for _, e := range es {
		j, err := inspect.Get(ctx, r.pool, e.scope, e.job.ID)
		switch {
		case err != nil && unreachable(err):
			unread = append(unread, e)
		case err != nil:
			r.report(e, e.job, err)
		case j.Status == runledger.JobStatusLeased && j.RunNumber == e.job.RunNumber && j.Attempt == e.job.Attempt &&
			j.WorkerID != nil && *j.WorkerID == r.cfg.WorkerID:
			held = append(held, e)
		case landed(e, j):
			r.report(e, j, nil)
		default:
			r.report(e, j, errLeaseLost)
		}
	}
	return unread, held
}

// unreachable reports an error by which a read did not reach the
// database, or got no answer from it: the same read may succeed later.
func unreachable(err error) bool {
	return runledger.IsTransient(err) || errors.Is(err, runledger.ErrCommitUnconfirmed) ||
		errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)
}

// landed reports whether j, as read back, shows e's own write: at e's run
// and attempt, SUCCEEDED for a completion; for a failure, out of LEASED
// (PENDING or DEAD_LETTERED) with e's error code. A recovery at the same
// attempt records job.lease_expired, a cancel leaves it CANCELED.
func landed(e *execution, j runledger.Job) bool {
	if e.handBack {
		// A release leaves the job PENDING at the attempt before.
		return j.RunNumber == e.job.RunNumber && j.Attempt == e.job.Attempt-1 && j.Status == runledger.JobStatusPending
	}
	if j.RunNumber != e.job.RunNumber || j.Attempt != e.job.Attempt {
		return false
	}
	if e.handBack {
		return false
	}
	if e.failure == nil {
		return j.Status == runledger.JobStatusSucceeded
	}
	return (j.Status == runledger.JobStatusPending || j.Status == runledger.JobStatusDeadLettered) &&
		j.LastErrorCode != nil && *j.LastErrorCode == e.failure.ErrorCode
}

// report turns a committed write of an attempt into its Finished.
func (r *run) report(e *execution, j runledger.Job, refused error) {
	f := Finished{Job: j, Err: e.err, Duration: e.duration}
	switch {
	case refused != nil:
		e.lost.Store(true)
		f.Job, f.Outcome, f.Err = e.job, OutcomeLost, refused
	case e.handBack:
		f.Outcome = OutcomeHandedBack
	case e.failure == nil:
		f.Outcome = OutcomeSucceeded
	default:
		f.Kind = e.failure.Kind
		f.Outcome = OutcomeRetried
		if j.Status == runledger.JobStatusDeadLettered {
			f.Outcome = OutcomeDeadLettered
		}
	}
	r.finish(e, f)
}

// finish forgets the attempt, frees its hold on the handler slot and
// tells OnFinished.
func (r *run) finish(e *execution, f Finished) {
	r.forget(e.job.ID)
	r.release(e)
	if f.Outcome == OutcomeLost {
		r.log.Warn("runledger worker: lost the lease of a job; nothing was written for its attempt",
			"worker", r.fp, "job_id", e.job.ID, "job_type", e.job.JobType, "attempt", e.job.Attempt)
	}
	if r.cfg.OnFinished != nil {
		r.hook("OnFinished", func() { r.cfg.OnFinished(f) })
	}
}

// hook runs a Config hook, recovering and logging its panic: a hook's bug
// never stops the worker (its other attempts would stay LEASED).
func (r *run) hook(name string, call func()) {
	defer func() {
		if p := recover(); p != nil {
			r.log.Error("runledger worker: a hook panicked; the worker goes on", "worker", r.fp, "hook", name,
				"panic", fmt.Sprint(p), "stack", string(debug.Stack()))
		}
	}()
	call()
}

// leaseEnd is the worker's estimate of when the attempt's lease ends.
func (e *execution) leaseEnd() time.Time {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.leaseUntil
}
