package inspect

import (
	"context"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/db"
	"github.com/runledger-go/runledger/internal/dberr"
	"github.com/runledger-go/runledger/internal/rows"
	"github.com/runledger-go/runledger/internal/txn"
	"github.com/runledger-go/runledger/internal/validate"
	"github.com/runledger-go/runledger/replay"
	"github.com/runledger-go/runledger/requeue"
)

// DefaultDetailLimit is the number of events, and of replays, GetDetail
// returns when the request sets none.
const DefaultDetailLimit = 100

// DetailRequest asks for a job's detail: the job, a page of its events,
// a page of the replays made from it, the job it was replayed from, and
// its requeue history.
type DetailRequest struct {
	// Scope is the caller's tenant; a job outside it is
	// runledger.CodeJobNotFound.
	Scope runledger.Scope
	JobID uuid.UUID
	// EventLimit is the most events returned, 1 to runledger.MaxLimit; 0 means
	// DefaultDetailLimit. They are the newest ones (before EventsBefore,
	// when set), in the order they happened.
	EventLimit int
	// EventsBefore, when set, pages back through the history: only events
	// with a smaller id (pass Detail.Events[0].ID for the page before).
	EventsBefore *int64
	// ReplayLimit is the most replays returned, 1 to runledger.MaxLimit; 0 means
	// DefaultDetailLimit. They are the oldest ones after ReplaysAfter.
	ReplayLimit int
	// ReplaysAfter, when set, pages forward through the replays: only those
	// after that replay job (pass the last ReplayJobID of a page).
	ReplaysAfter *uuid.UUID
}

// Validate checks the scope (job.organization_invalid) and the limits
// (job.event_limit_invalid, job.list_limit_invalid) without touching the
// database.
func (r DetailRequest) Validate() error {
	if err := validate.Scope(r.Scope); err != nil {
		return err
	}
	if r.EventLimit != 0 {
		if err := validate.Limit(r.EventLimit, errEventLimitInvalid, "event limit"); err != nil {
			return err
		}
	}
	if r.ReplayLimit != 0 {
		if err := validate.Limit(r.ReplayLimit, errListLimitInvalid, "replay limit"); err != nil {
			return err
		}
	}
	return nil
}

// Detail is a job with a page of its history and lineage, as GetDetail
// reads them.
type Detail struct {
	Job runledger.Job `json:"job"`
	// Events is a page of the job's history, in the order it happened:
	// the newest events (before the request's cursor).
	Events []runledger.JobEvent `json:"events"`
	// MoreEvents reports older events than the first of Events (in JSON
	// only when true).
	MoreEvents bool `json:"more_events,omitempty"`
	// Replays are a page of the replays made from the job, oldest first,
	// each with its current status and run; empty, not nil, when there are
	// none.
	Replays []runledger.ReplayLineage `json:"replays"`
	// MoreReplays reports replays after the last of Replays (in JSON only
	// when true).
	MoreReplays bool `json:"more_replays,omitempty"`
	// ReplayedFrom is the job's own lineage when it is a replay, else nil.
	ReplayedFrom *runledger.ReplayLineage `json:"replayed_from"`
	// Requeues is the job's requeue history, oldest first (at most
	// requeue.MaxHistory): from which run, when and why each requeue was
	// made; empty, not nil, when there are none (in JSON only when there
	// are some).
	Requeues []requeue.Record `json:"requeues,omitempty"`
}

// GetDetail reads a job, a page of its events, a page of the replays made
// from it, the job it was replayed from and its requeue history in one REPEATABLE READ,
// read-only transaction, so the reads agree with each other. The request
// is validated first. A job outside the caller's scope is
// runledger.CodeJobNotFound. No row lock. Its cost is bounded by the
// pages, whatever the length of the job's history.
func GetDetail(ctx context.Context, pool *pgxpool.Pool, req DetailRequest) (Detail, error) {
	if err := req.Validate(); err != nil {
		return Detail{}, err
	}
	tx, err := pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return Detail{}, dberr.Translate(ctx, "begin job detail transaction", err)
	}
	defer txn.Rollback(ctx, tx)
	var d Detail
	if d.Job, err = Get(ctx, tx, req.Scope, req.JobID); err != nil {
		return Detail{}, err
	}
	if d.Events, d.MoreEvents, err = eventPage(ctx, tx, req); err != nil {
		return Detail{}, err
	}
	if d.Replays, d.MoreReplays, err = replay.List(ctx, tx, req.Scope, req.JobID, replay.LineagePage{After: req.ReplaysAfter, Limit: req.ReplayLimit}); err != nil {
		return Detail{}, err
	}
	if d.ReplayedFrom, err = replay.Origin(ctx, tx, req.Scope, req.JobID); err != nil {
		return Detail{}, err
	}
	if d.Requeues, err = requeue.History(ctx, tx, req.Scope, req.JobID); err != nil {
		return Detail{}, err
	}
	return d, nil
}

// eventPage reads the request's page of events, oldest first, and whether
// older ones exist.
func eventPage(ctx context.Context, q Querier, req DetailRequest) ([]runledger.JobEvent, bool, error) {
	limit := req.EventLimit
	if limit == 0 {
		limit = DefaultDetailLimit
	}
	q = txn.Wrap(q)
	rs, err := queries.JobEventListNewestForJob(ctx, q, db.JobEventListNewestForJobParams{
		JobID: req.JobID, OrganizationID: rows.Tenant(req.Scope), BeforeEventID: req.EventsBefore, MaxEvents: int32(limit + 1),
	})
	if err != nil {
		return nil, false, dberr.Translate(ctx, "list job events", err)
	}
	more := len(rs) > limit
	if more {
		rs = rs[:limit]
	}
	events, err := rows.All(rs, func(r db.JobEventListNewestForJobRow) (runledger.JobEvent, error) { return rows.Event(r.JobEvent) })
	if err != nil {
		return nil, false, err
	}
	for i, j := 0, len(events)-1; i < j; i, j = i+1, j-1 {
		events[i], events[j] = events[j], events[i]
	}
	return events, more, nil
}
