package replay

import (
	"context"
	"errors"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/db"
	"github.com/runledger-go/runledger/internal/dberr"
	"github.com/runledger-go/runledger/internal/rows"
	"github.com/runledger-go/runledger/internal/txn"
)

// Lineage reads. Both take any db.DBTX (a pool, a connection or a
// transaction, like jobs.Querier) and lock nothing; a job outside the
// caller's scope is runledger.CodeJobNotFound, exactly like a missing one.

// List returns the replays made from a source job, oldest first, each with
// the replay job's current status and run. A source never replayed gives
// an empty, non-nil slice (a second read then checks that the source
// exists in scope).
func List(ctx context.Context, q db.DBTX, scope runledger.Scope, sourceID uuid.UUID) ([]runledger.ReplayLineage, error) {
	q = txn.Wrap(q)
	rs, err := queries.JobReplayListForSource(ctx, q, db.JobReplayListForSourceParams{
		SourceJobID: sourceID, OrganizationID: scope.OrganizationIDPtr(),
	})
	if err != nil {
		return nil, dberr.Translate(ctx, "list job replays", err)
	}
	if len(rs) == 0 {
		if err := rows.RequireJob(ctx, q, scope, sourceID); err != nil {
			return nil, err
		}
	}
	return rows.All(rs, func(r db.JobReplayListForSourceRow) (runledger.ReplayLineage, error) {
		status, err := rows.Status(r.ReplayStatus)
		if err != nil {
			return runledger.ReplayLineage{}, err
		}
		l := record(r.JobReplay)
		l.ReplayStatus, l.ReplayRunNumber = &status, &r.ReplayRunNumber
		return l, nil
	})
}

// Origin returns the lineage of a replay job: the source and run it was
// replayed from, with the request key and reason; nil, nil when the job
// exists in scope but is not a replay (checked with a second read).
// ReplayStatus and ReplayRunNumber are left nil: read the job itself for
// its state.
func Origin(ctx context.Context, q db.DBTX, scope runledger.Scope, replayID uuid.UUID) (*runledger.ReplayLineage, error) {
	q = txn.Wrap(q)
	r, err := queries.JobReplayGetForReplayJob(ctx, q, db.JobReplayGetForReplayJobParams{
		ReplayJobID: replayID, OrganizationID: scope.OrganizationIDPtr(),
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
	l := record(r)
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
