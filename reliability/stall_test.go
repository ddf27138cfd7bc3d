package reliability_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/internal/testdb"
	"github.com/runledger-go/runledger/internal/testdb/pgproxy"
	"github.com/runledger-go/runledger/internal/txn"
	"github.com/runledger-go/runledger/internal/wake"
	"github.com/runledger-go/runledger/jobs"
	"github.com/runledger-go/runledger/lease"
	"github.com/runledger-go/runledger/replay"
)

// stallDeadline is the callers' deadline in the stall tests, and
// stallBound how long past it an operation may take: the engine's Grace
// plus room for a loaded machine. Before the engine bounded its cleanup, a
// replay took about 36 s here.
const (
	stallDeadline = 500 * time.Millisecond
	stallBound    = txn.Grace + 1500*time.Millisecond
)

// stalledPool is a one-connection pool through a proxy whose connection is
// open and idle; the test stalls the proxy when it wants.
func stalledPool(t *testing.T, e *env) (*pgproxy.Proxy, *pgxpool.Pool) {
	t.Helper()
	proxy, pool, _ := e.proxied(nil)
	if _, err := pool.Exec(testdb.Context(t), "SELECT 1"); err != nil { // open the one connection
		t.Fatal(err)
	}
	// Closed before the pool: pgx's own cleanup of a connection it gave up
	// sends a cancel request of its own, which a stalled proxy would hold
	// for its 15 s.
	t.Cleanup(proxy.Close)
	return proxy, pool
}

// Every operation keeps its caller's deadline when the server's host stops
// answering (the proxy black-holes both the connection and the cancel
// requests): it returns within Grace of the deadline, with an error that
// wraps context.DeadlineExceeded, commit-unconfirmed where a COMMIT (or an
// autocommit write) was in flight, transient where nothing can have been
// written. Each runs once before the stall, so that its statements are
// prepared (a warm connection, where the stall meets the writes); on a
// cold one the stall meets pgx's prepare step, where nothing has run:
// transient.
func TestStalledServerKeepsTheDeadline(t *testing.T) {
	t.Parallel()
	// The workers' wake-up rides in a pipeline at most once per interval
	// and process: sent every time, the warm call prepares every
	// statement the stalled call sends.
	t.Cleanup(wake.Always())
	type call func(ctx context.Context, pool *pgxpool.Pool, seed seeded) error
	// warm runs each call once before the stall, on another job: a replay
	// of another source, another key, another lease.
	warm := func(t *testing.T, ctx context.Context, e *env, pool *pgxpool.Pool, run call) {
		t.Helper()
		s := seeded{source: testdb.Seed(t, e.admin, testdb.Succeeded(runledger.Global())), jobType: "email", stall: func() {}}
		s.leased = testdb.Leased(t, ctx, e.admin, jobs.EnqueueRequest{JobType: "email"})
		if err := run(ctx, pool, s); err != nil {
			t.Fatalf("before the stall: %v", err)
		}
	}
	cases := []struct {
		name        string
		unconfirmed bool // the outcome is unknown: a write may have committed
		run         call
	}{
		// On Citus a replay's COMMIT goes in a second round trip (with its
		// writes, once the source is locked): the stall meets the first
		// round trip's reply, before anything is sent that could commit.
		{"replay", !testdb.Citus(), func(ctx context.Context, pool *pgxpool.Pool, s seeded) error {
			_, err := replay.SucceededJob(ctx, pool, req(s.source, "stall", "stalled network"))
			return err
		}},
		{"replay in a caller transaction", false, func(ctx context.Context, pool *pgxpool.Pool, s seeded) error {
			tx, err := pool.Begin(context.Background()) // before the stall
			if err != nil {
				return err
			}
			defer func() { _ = tx.Rollback(context.Background()) }() // releases the closed connection
			s.stall()
			_, err = replay.SucceededJobTx(ctx, tx, req(s.source, "stall", "stalled network"))
			if err != nil && !tx.Conn().IsClosed() {
				return errors.New("the caller's connection was left open after an unconfirmed cancel")
			}
			return err
		}},
		// On Citus an enqueue is a transaction (the definition read, the
		// insert, then its event with the COMMIT): the stall meets BEGIN's
		// reply, before anything is sent.
		{"keyed enqueue", !testdb.Citus(), func(ctx context.Context, pool *pgxpool.Pool, s seeded) error {
			_, err := jobs.Enqueue(ctx, pool, jobs.EnqueueRequest{JobType: s.jobType, IdempotencyKey: s.source.String()})
			return err
		}},
		{"unkeyed enqueue", !testdb.Citus(), func(ctx context.Context, pool *pgxpool.Pool, s seeded) error {
			_, err := jobs.Enqueue(ctx, pool, jobs.EnqueueRequest{JobType: s.jobType})
			return err
		}},
		// On Citus the claim is a transaction (the tenants with due work,
		// then a claim per tenant): a stall before BEGIN's reply leaves
		// nothing sent that could commit.
		{"claim", !testdb.Citus(), func(ctx context.Context, pool *pgxpool.Pool, s seeded) error {
			_, err := lease.Claim(ctx, pool, lease.ClaimRequest{WorkerID: "w", Limit: 1, Lease: time.Minute})
			return err
		}},
		// On Citus the completion is a transaction too (the write, then its
		// events): the stall meets BEGIN's reply, before anything is sent.
		{"complete", !testdb.Citus(), func(ctx context.Context, pool *pgxpool.Pool, s seeded) error {
			_, err := lease.Complete(ctx, pool, testdb.CompleteRequest(s.leased))
			return err
		}},
		{"bulk replay", false, func(ctx context.Context, pool *pgxpool.Pool, s seeded) error {
			_, err := replay.Bulk(ctx, pool, replay.BulkRequest{Key: "stall-bulk" + s.source.String(), Reason: "stalled network",
				Sources: []replay.Source{{JobID: s.source, ExpectedRunNumber: 1}}}, nil)
			return err
		}},
	}
	for _, c := range cases {
		c := c
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			ctx := testdb.Context(t)
			s := seeded{source: testdb.Seed(t, e.admin, testdb.Succeeded(runledger.Global())), jobType: "email"}
			s.leased = testdb.Leased(t, ctx, e.admin, jobs.EnqueueRequest{JobType: "email"})
			proxy, pool := stalledPool(t, e)
			warm(t, ctx, e, pool, c.run)
			s.stall = proxy.Stall
			if c.name != "replay in a caller transaction" {
				proxy.Stall()
			}
			callCtx, cancel := context.WithTimeout(ctx, stallDeadline)
			defer cancel()
			start := time.Now()
			err := c.run(callCtx, pool, s)
			took := time.Since(start)
			if took > stallDeadline+stallBound {
				t.Errorf("returned %s after the call, want within %s of its %s deadline", took, stallBound, stallDeadline)
			}
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("error %v does not wrap context.DeadlineExceeded", err)
			}
			if got := errors.Is(err, runledger.ErrCommitUnconfirmed); got != c.unconfirmed {
				t.Errorf("commit unconfirmed = %v, want %v: %v", got, c.unconfirmed, err)
			}
			if !c.unconfirmed && !runledger.IsTransient(err) && !errors.Is(err, runledger.ErrCommitUnconfirmed) {
				t.Errorf("want a transient error: %v", err)
			}
		})
	}
}

// seeded is what a stall case starts from.
type seeded struct {
	source  uuid.UUID
	jobType string
	leased  runledger.Job
	stall   func()
}
