package jobs

import (
	"context"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/internal/dberr"
	"github.com/runledger-go/runledger/internal/txn"
	"github.com/runledger-go/runledger/replay"
)

// Detail is a job with its history and lineage, as GetDetail reads them.
type Detail struct {
	Job runledger.Job `json:"job"`
	// Events is the job's whole history, in the order it happened.
	Events []runledger.JobEvent `json:"events"`
	// Replays are the replays made from the job, oldest first, each with
	// its current status and run; empty, not nil, when there are none.
	Replays []runledger.ReplayLineage `json:"replays"`
	// ReplayedFrom is the job's own lineage when it is a replay, else nil.
	ReplayedFrom *runledger.ReplayLineage `json:"replayed_from"`
}

// GetDetail reads a job, its events, the replays made from it and the job
// it was replayed from in one REPEATABLE READ, read-only transaction, so
// the four reads agree with each other. A job outside the caller's scope
// is runledger.CodeJobNotFound. No row lock.
func GetDetail(ctx context.Context, pool *pgxpool.Pool, scope runledger.Scope, id uuid.UUID) (Detail, error) {
	tx, err := pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return Detail{}, dberr.Translate(ctx, "begin job detail transaction", err)
	}
	defer txn.Rollback(ctx, tx)
	var d Detail
	if d.Job, err = Get(ctx, tx, scope, id); err != nil {
		return Detail{}, err
	}
	if d.Events, err = Events(ctx, tx, scope, id); err != nil {
		return Detail{}, err
	}
	if d.Replays, err = replay.List(ctx, tx, scope, id); err != nil {
		return Detail{}, err
	}
	if d.ReplayedFrom, err = replay.Origin(ctx, tx, scope, id); err != nil {
		return Detail{}, err
	}
	return d, nil
}
