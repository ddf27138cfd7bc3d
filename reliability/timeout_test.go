package reliability_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/internal/testdb"
	"github.com/runledger-go/runledger/replay"
)

// TestReplayBlockedOnTheSourceHonoursDeadlinesAndTimeouts blocks a replay
// on the source row (the test holds it FOR UPDATE) and lets each kind of
// limit end the wait: the caller's context deadline, the server's
// lock_timeout and statement_timeout (as session settings of the pool, or
// SET LOCAL in the caller's transaction). Each time the caller gets a
// transient error (wrapping context.DeadlineExceeded for the deadline,
// with SQLSTATE 55P03 or 57014 for the server limits), the transaction is
// rolled back, the backend is left holding no lock (pgx cancels a
// statement asynchronously, so this is polled in pg_locks), nothing is
// written, and once the source is free the same request succeeds.
func TestReplayBlockedOnTheSourceHonoursDeadlinesAndTimeouts(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name     string
		params   map[string]string // pool session settings
		setLocal string            // SET LOCAL in the caller's transaction (Tx entry point)
		tx       bool              // use SucceededJobTx in a caller transaction
		deadline time.Duration     // a context deadline
		sqlstate string
	}{
		{name: "context deadline", deadline: 500 * time.Millisecond},
		{name: "lock_timeout session setting", params: map[string]string{"lock_timeout": "300ms"}, sqlstate: "55P03"},
		{name: "statement_timeout session setting", params: map[string]string{"statement_timeout": "300ms"}, sqlstate: "57014"},
		{name: "context deadline in a caller transaction", tx: true, deadline: 500 * time.Millisecond},
		{name: "SET LOCAL lock_timeout in a caller transaction", tx: true, setLocal: "SET LOCAL lock_timeout = '300ms'", sqlstate: "55P03"},
		{name: "SET LOCAL statement_timeout in a caller transaction", tx: true, setLocal: "SET LOCAL statement_timeout = '300ms'", sqlstate: "57014"},
	}
	for _, c := range cases {
		c := c
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			if c.sqlstate == "55P03" && testdb.Citus() {
				t.Skip("on Citus the lock wait is on a worker node, which the coordinator session's lock_timeout does not reach (docs/SCALING.md)")
			}
			ctx := testdb.Context(t)
			e := newEnv(t)
			sourceID := testdb.Seed(t, e.admin, testdb.Succeeded(runledger.Global()))
			before := takeSnapshot(t, e.admin)
			r := req(sourceID, "timeout-key", "timeout reason")
			pool, app := e.target(c.params)
			if _, err := pool.Exec(ctx, "SELECT 1"); err != nil { // open the one connection
				t.Fatal(err)
			}
			pid := e.backendOf(app)
			release := holdSource(e, sourceID)

			callCtx := ctx
			if c.deadline > 0 {
				var cancel context.CancelFunc
				callCtx, cancel = context.WithTimeout(ctx, c.deadline)
				defer cancel()
			}
			start := time.Now()
			var err error
			var tx pgx.Tx
			if c.tx {
				tx, err = pool.Begin(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if c.setLocal != "" {
					if _, err := tx.Exec(ctx, c.setLocal); err != nil {
						t.Fatal(err)
					}
				}
				_, err = replay.SucceededJobTx(callCtx, tx, r)
			} else {
				_, err = replay.SucceededJob(callCtx, pool, r)
			}
			elapsed := time.Since(start)
			e1 := testdb.WantTransient(t, err)
			if c.deadline > 0 {
				if !errors.Is(err, context.DeadlineExceeded) {
					t.Fatalf("err %v (%s) does not wrap context.DeadlineExceeded", err, testdb.Detail(err))
				}
				if elapsed < c.deadline {
					t.Fatalf("returned after %s, before the %s deadline", elapsed, c.deadline)
				}
			} else if e1.SQLState != c.sqlstate {
				t.Fatalf("sqlstate %q (%s), want %s", e1.SQLState, testdb.Detail(err), c.sqlstate)
			}
			if tx != nil {
				_ = tx.Rollback(context.Background()) // the caller's part
			}
			// The transaction is gone: the backend holds no lock (it
			// rolled back, or exited after pgx closed its connection) and
			// is not left idle in a transaction.
			// When pgx closed the connection, the backend may sit in its
			// aborted transaction until it notices; poll.
			e.waitNoLocks(pid)
			e.waitFor("the backend to leave its transaction", func() bool {
				st := testdb.Scalar[string](t, e.admin, `SELECT coalesce((SELECT state FROM pg_stat_activity WHERE pid = $1), 'gone')`, pid)
				return st == "idle" || st == "gone"
			})
			checkNothingWritten(t, e.admin, before)

			release()
			got := testdb.MustReplayed(t)(replay.SucceededJob(ctx, pool, r))
			if got.Disposition != runledger.DispositionInserted {
				t.Fatalf("retry %+v, want Inserted", got)
			}
			checkOneReplay(t, e.admin, sourceID, r.Key, r.Reason, 1)
		})
	}
}
