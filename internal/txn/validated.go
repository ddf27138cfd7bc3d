package txn

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runledger-go/runledger/db"
)

// Request is a request that checks itself without touching the database.
type Request interface{ Validate() error }

// Validated runs op on q once req is valid: every entry point validates
// before any database work, so an invalid request fails the same way on a
// closed pool.
func Validated[R Request, T any](ctx context.Context, q db.DBTX, req R, op func(context.Context, db.DBTX, R) (T, error)) (T, error) {
	q = Wrap(q)
	if err := req.Validate(); err != nil {
		var zero T
		return zero, err
	}
	return op(ctx, q, req)
}

// OwnedWrite validates req, then runs op on a session of its own on pool,
// named name in error details. op's statements run with One, each
// committing on its own: a reply lost after a write was sent is an error
// matching runledger.ErrCommitUnconfirmed.
func OwnedWrite[R Request, T any](ctx context.Context, pool *pgxpool.Pool, name string, req R, op func(context.Context, *Session, R) (T, error)) (T, error) {
	var zero T
	if err := req.Validate(); err != nil {
		return zero, err
	}
	s, err := Own(ctx, pool, name)
	if err != nil {
		return zero, err
	}
	defer s.End(ctx)
	return op(ctx, s, req)
}

// JoinedWrite validates req, then runs op in the caller's transaction.
func JoinedWrite[R Request, T any](ctx context.Context, tx pgx.Tx, name string, req R, op func(context.Context, *Session, R) (T, error)) (T, error) {
	if err := req.Validate(); err != nil {
		var zero T
		return zero, err
	}
	return op(ctx, Join(tx, name), req)
}
