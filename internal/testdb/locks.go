package testdb

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/google/uuid"
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
	probe := "SELECT 1 FROM " + table + " WHERE " + where + " FOR " + mode + " NOWAIT"
	args := []any{arg}
	if Citus() && table != "job_definitions" {
		// A row lock on Citus needs a statement routed to one tenant:
		// probe the rows' tenant (read first, without a lock) by name.
		tenants := Column[uuid.UUID](t, pool, "SELECT DISTINCT organization_id FROM "+table+" WHERE "+where, arg)
		if len(tenants) == 0 {
			return false
		}
		locked := false
		for _, tenant := range tenants {
			locked = locked || rowLockedIn(t, ctx, pool, "SELECT 1 FROM "+table+" WHERE organization_id = $2 AND ("+where+") FOR "+mode+" NOWAIT", mode, arg, tenant)
		}
		return locked
	}
	return rowLockedIn(t, ctx, pool, probe, mode, args...)
}

// rowLockedIn runs a NOWAIT lock probe in a transaction of its own and
// reports lock_not_available.
func rowLockedIn(t testing.TB, ctx context.Context, pool *pgxpool.Pool, probe, mode string, args ...any) bool {
	t.Helper()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatalf("begin lock probe: %v", err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if Citus() {
		// Citus serializes row locks on a reference table through a lock of
		// the coordinator's, which a NOWAIT row lock waits for: bound it.
		if _, err := tx.Exec(ctx, "SET LOCAL lock_timeout = '500ms'"); err != nil {
			t.Fatalf("lock probe: %v", err)
		}
	}
	_, err = tx.Exec(ctx, probe, args...)
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

// WaitersSQL is a query of one column, pid: the sessions of the current
// database that wait for a lock not granted, in pg_locks, and on Citus
// also those whose distributed transaction waits on a worker node
// (citus_lock_waits, whose global pid is the node id times 10^10 plus the
// coordinator's pid: a coordinator's pg_locks shows no wait for a lock on
// a worker's shard), of this database's sessions only. Tests that filter
// the waiters select from it.
func WaitersSQL() string {
	q := `SELECT l.pid FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
	      WHERE NOT l.granted AND a.datname = current_database()`
	if Citus() {
		// citus_lock_waits covers every database of the cluster: keep the
		// waits of this database's coordinator sessions, so that a test
		// running in parallel in another database is not counted.
		q += ` UNION SELECT w.pid FROM (SELECT (waiting_gpid % 10000000000)::int AS pid FROM citus_lock_waits) w
		       JOIN pg_stat_activity a ON a.pid = w.pid WHERE a.datname = current_database()`
	}
	return q
}

// LockWaiters returns the pids of the sessions that wait for a lock (see
// WaitersSQL), of the database q is connected to.
func LockWaiters(t testing.TB, q Querier) []int32 {
	t.Helper()
	return Column[int32](t, q, WaitersSQL())
}

// BlockersSQL is a query of one column, pid, with $1 a waiting backend's
// pid: the backends it waits for (pg_blocking_pids), and on Citus also
// those its distributed transaction waits for on a worker node.
func BlockersSQL() string {
	q := `SELECT b AS pid FROM unnest(pg_blocking_pids($1)) AS b`
	if Citus() {
		q += ` UNION SELECT (blocking_gpid % 10000000000)::int FROM citus_lock_waits
		       WHERE waiting_gpid % 10000000000 = $1`
	}
	return q
}

// Waiting reports whether backend pid waits for a lock; pid 0 means any
// backend of the database.
func Waiting(t testing.TB, q Querier, pid uint32) bool {
	t.Helper()
	for _, w := range LockWaiters(t, q) {
		if pid == 0 || uint32(w) == pid {
			return true
		}
	}
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
	WaitFor(t, what, func() bool { return Waiting(t, pool, pid) })
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

// LockJob locks job id's row FOR mode ("UPDATE", "NO KEY UPDATE", ...) in
// q's transaction, waiting as long as it must. It names the job's tenant
// (read first), as Citus needs for a row lock.
func LockJob(t testing.TB, q Querier, id uuid.UUID, mode string) {
	t.Helper()
	tenant := Scalar[uuid.UUID](t, q, `SELECT organization_id FROM job_queue WHERE id = $1`, id)
	Exec(t, q, `SELECT 1 FROM job_queue WHERE organization_id = $1 AND id = $2 FOR `+mode, tenant, id)
}
