package testdb

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Lock observation: what other transactions hold, seen from a connection
// of the test's own, with NOWAIT probes and pg_locks instead of sleeps.

// RowLocked reports whether another transaction holds a lock on the rows
// of table matching where (with arg as $1) that conflicts with mode
// ("UPDATE", "NO KEY UPDATE", "SHARE", "KEY SHARE"): it tries the mode
// with NOWAIT in a transaction of its own and reports lock_not_available.
func RowLocked(t testing.TB, pool *pgxpool.Pool, table, where string, arg any, mode string) bool {
	t.Helper()
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatalf("begin lock probe: %v", err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, "SELECT 1 FROM "+table+" WHERE "+where+" FOR "+mode+" NOWAIT", arg)
	var pgErr *pgconn.PgError
	switch {
	case err == nil:
		return false
	case errors.As(err, &pgErr) && pgErr.Code == "55P03":
		return true
	}
	t.Fatalf("lock probe FOR %s: %v", mode, err)
	return false
}

// WaitBlocked waits (WaitFor) until backend pid waits for a lock that is
// not granted; pid 0 means any backend of the current database.
func WaitBlocked(t testing.TB, pool *pgxpool.Pool, pid uint32) {
	t.Helper()
	what := "a backend to wait on a lock"
	if pid != 0 {
		what = fmt.Sprintf("backend %d to wait on a lock", pid)
	}
	WaitFor(t, what, func() bool {
		return Scalar[bool](t, pool, `
			SELECT EXISTS (SELECT 1 FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
			               WHERE NOT l.granted AND a.datname = current_database()
			                 AND ($1 = 0 OR l.pid = $1))`, int32(pid))
	})
}

// Begin begins a transaction on q, rolled back at cleanup (a no-op after
// the test committed it).
func Begin(t testing.TB, ctx context.Context, q interface {
	Begin(context.Context) (pgx.Tx, error)
}) pgx.Tx {
	t.Helper()
	tx, err := q.Begin(ctx)
	if err != nil {
		t.Fatalf("begin: %v", err)
	}
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	return tx
}

// InTx runs fn in a transaction on q and rolls it back when fn returns, so
// that a one-connection pool is free again afterwards.
func InTx(t testing.TB, ctx context.Context, q interface {
	Begin(context.Context) (pgx.Tx, error)
}, fn func(pgx.Tx)) {
	t.Helper()
	tx, err := q.Begin(ctx)
	if err != nil {
		t.Fatalf("begin: %v", err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	fn(tx)
}
