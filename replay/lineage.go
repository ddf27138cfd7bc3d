package replay

import (
	"context"
	"errors"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/db"
	"github.com/runledger-go/runledger/internal/dberr"
	"github.com/runledger-go/runledger/internal/errs"
	"github.com/runledger-go/runledger/internal/rows"
	"github.com/runledger-go/runledger/internal/txn"
	"github.com/runledger-go/runledger/internal/validate"
)

// Lineage reads. Both take any db.DBTX (a pool, a connection or a
// transaction, like jobs.Querier) and lock nothing; a job outside the
// caller's scope is runledger.CodeJobNotFound, exactly like a missing one.

// DefaultListLimit is the page size of List when LineagePage.Limit is 0.
const DefaultListLimit = 100

// maxListLimit is the largest page List returns.
const maxListLimit = 1000

// LineagePage selects a page of List.
type LineagePage struct {
	// After, when set, starts the page after that replay job (the last one
	// of the previous page); nil starts at the oldest.
	After *uuid.UUID
	// Limit is the page size, 1 to 1000; 0 means DefaultListLimit.
	Limit int
}

// List returns a page of the replays made from a source job, oldest first,
// each with the replay job's current status and run, and whether more
// follow (pass the last one's ReplayJobID as After for the next page). A
// limit outside 0 to 1000 is job.list_limit_invalid. A source never
// replayed gives an empty, non-nil slice (a second read then checks that
// the source exists in scope).
func List(ctx context.Context, q db.DBTX, scope runledger.Scope, sourceID uuid.UUID, page LineagePage) (replays []runledger.ReplayLineage, more bool, err error) {
	limit := page.Limit
	if limit == 0 {
		limit = DefaultListLimit
	}
	if limit < 1 || limit > maxListLimit {
		return nil, false, errs.ListLimitInvalid.Newf("lineage page limit must be between 1 and %d, got %d", maxListLimit, page.Limit)
	}
	if err := validate.Scope(scope); err != nil {
		return nil, false, err
	}
	q = txn.Wrap(q)
	rs, err := queries.JobReplayListForSource(ctx, q, db.JobReplayListForSourceParams{
		SourceJobID: sourceID, OrganizationID: rows.Tenant(scope), AfterReplayJobID: page.After, MaxReplays: int32(limit + 1),
	})
	if err != nil {
		return nil, false, dberr.Translate(ctx, "list job replays", err)
	}
	if len(rs) > limit {
		rs, more = rs[:limit], true
	}
	if len(rs) == 0 {
		if err := rows.RequireJob(ctx, q, scope, sourceID); err != nil {
			return nil, false, err
		}
	}
	replays, err = rows.All(rs, func(r db.JobReplayListForSourceRow) (runledger.ReplayLineage, error) {
		status, err := rows.Status(r.ReplayStatus)
		if err != nil {
			return runledger.ReplayLineage{}, err
		}
		l := record(r.JobReplay)
		l.ReplayStatus, l.ReplayRunNumber = &status, &r.ReplayRunNumber
		return l, nil
	})
	return replays, more, err
}

// Origin returns the lineage of a replay job: the source and run it was
// replayed from, with the request key and reason; nil, nil when the job
// exists in scope but is not a replay (checked with a second read).
// ReplayStatus and ReplayRunNumber are left nil: read the job itself for
// its state.
func Origin(ctx context.Context, q db.DBTX, scope runledger.Scope, replayID uuid.UUID) (*runledger.ReplayLineage, error) {
	if err := validate.Scope(scope); err != nil {
		return nil, err
	}
	q = txn.Wrap(q)
	r, err := queries.JobReplayGetForReplayJob(ctx, q, db.JobReplayGetForReplayJobParams{
		ReplayJobID: replayID, OrganizationID: rows.Tenant(scope),
	})
	if errors.Is(err, pgx.ErrNoRows) {
		if err := rows.RequireJob(ctx, q, scope, replayID); err != nil {
			return nil, err
		}
		return nil, nil
	}
	if err != nil {
		return nil, dberr.Translate(ctx, "get job replay lineage", err)
	}
	l := record(r.JobReplay)
	return &l, nil
}

// record is a lineage row as callers see it, without the replay's state.
func record(r db.JobReplay) runledger.ReplayLineage {
	return runledger.ReplayLineage{
		ReplayJobID:      r.ReplayJobID,
		SourceJobID:      r.SourceJobID,
		SourceRunNumber:  r.SourceRunNumber,
		ReplayRequestKey: r.ReplayRequestKey,
		Reason:           r.Reason,
		CreatedAt:        r.CreatedAt.UTC(),
	}
}
