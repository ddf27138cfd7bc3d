package requeue

import (
	"context"
	"encoding/json"
	"time"

	"github.com/google/uuid"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/db"
	"github.com/runledger-go/runledger/internal/dberr"
	"github.com/runledger-go/runledger/internal/errs"
	"github.com/runledger-go/runledger/internal/rows"
	"github.com/runledger-go/runledger/internal/txn"
)

// MaxHistory is the most requeues History returns.
const MaxHistory = 1000

// Record is one requeue of a job, read from its REQUEUED event.
type Record struct {
	// EventID is the REQUEUED event's id.
	EventID int64 `json:"event_id"`
	// FromRunNumber is the run that was requeued (the job went on at the
	// next run); FromAttempt is that run's last attempt, nil when it made
	// none (a job canceled before it was leased).
	FromRunNumber int32  `json:"from_run_number"`
	FromAttempt   *int32 `json:"from_attempt"`
	// RequeuedAt is when the requeue's transaction wrote the event.
	RequeuedAt time.Time `json:"requeued_at"`
	// Reason and StatePolicy are what the request gave
	// ("preserve_progress_and_checkpoint" or
	// "reset_progress_and_checkpoint").
	Reason      string `json:"reason"`
	StatePolicy string `json:"state_policy"`
}

// History returns the requeues of a job in the caller's scope, oldest
// first, at most MaxHistory, read on q (a pool, connection or transaction)
// without a lock; none (an empty, non-nil slice) for a job never requeued
// or outside the scope.
func History(ctx context.Context, q db.DBTX, scope runledger.Scope, jobID uuid.UUID) ([]Record, error) {
	q = txn.Wrap(q)
	rs, err := queries.JobEventListRequeuedForJob(ctx, q, db.JobEventListRequeuedForJobParams{
		OrganizationID: rows.Tenant(scope), JobID: jobID, MaxEvents: MaxHistory,
	})
	if err != nil {
		return nil, dberr.Translate(ctx, "list job requeues", err)
	}
	return rows.All(rs, func(r db.JobEventListRequeuedForJobRow) (Record, error) {
		e := r.JobEvent
		var p struct {
			Reason      string `json:"reason"`
			StatePolicy string `json:"state_policy"`
		}
		if err := json.Unmarshal(e.Payload, &p); err != nil {
			return Record{}, errs.Invariantf("decode REQUEUED event %d payload: %v", e.ID, err)
		}
		return Record{EventID: e.ID, FromRunNumber: e.RunNumber, FromAttempt: e.Attempt, RequeuedAt: e.OccurredAt.UTC(),
			Reason: p.Reason, StatePolicy: p.StatePolicy}, nil
	})
}
