package requeue_test

import (
	"context"
	"runtime"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/internal/failpoint"
	"github.com/runledger-go/runledger/internal/testdb"
	"github.com/runledger-go/runledger/internal/txn"
	"github.com/runledger-go/runledger/requeue"
)

// These tests install process-wide failpoints, so they do not run in
// parallel (parallel tests start only after the sequential ones finish)
// and their hooks ignore other jobs.

func onJob(id uuid.UUID, fn func(attempt int)) failpoint.Hook {
	return func(_ context.Context, arg any) {
		if c, ok := arg.(requeue.FailpointCall); ok && c.JobID == id {
			fn(c.Attempt)
		}
	}
}

// race makes the next requeue statement of the job miss by a snapshot
// race: another transaction changes the job (run 1 to run 9) and holds it
// uncommitted, so the statement's snapshot sees the job requeueable as
// observed but its lock waits; once the statement waits on the lock, the
// change commits, the lock finds the newest row changed, and the statement
// classifies the miss from its snapshot: requeueable, so the lock loop
// tries again. undo puts run 1 back (committed).
func race(t *testing.T, ctx context.Context, pool *pgxpool.Pool, id uuid.UUID) {
	t.Helper()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `UPDATE job_queue SET run_number = 9 WHERE id = $1`, id); err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			var waiters int
			if err := pool.QueryRow(ctx, `SELECT count(*) FROM (`+testdb.WaitersSQL()+`) w`).Scan(&waiters); err != nil {
				t.Errorf("wait for the requeue's lock wait: %v", err)
				_ = tx.Rollback(context.WithoutCancel(ctx))
				return
			}
			if waiters > 0 {
				break
			}
			runtime.Gosched()
		}
		if err := tx.Commit(ctx); err != nil {
			t.Errorf("commit the racing change: %v", err)
		}
	}()
}

func undo(t *testing.T, pool *pgxpool.Pool, id uuid.UUID) {
	t.Helper()
	testdb.Exec(t, pool, `UPDATE job_queue SET run_number = 1 WHERE id = $1`, id)
}

// onBegin runs fn at each owned requeue transaction's BEGIN, numbering
// them from 1 (each attempt of requeue.Job is a transaction of its own).
func onBegin(fn func(n int)) failpoint.Hook {
	n := 0
	return func(_ context.Context, arg any) {
		if c, ok := arg.(txn.FailpointCall); ok && c.Op == "compare-and-requeue" {
			n++
			fn(n)
		}
	}
}

// The snapshot race: the first attempt's statement sees the job
// requeueable as observed in its snapshot, but the job changed while it
// waited for the lock: it requeues nothing, the after-lock-miss hook sees
// the miss, and the loop tries again; the change is undone before the
// second attempt, which requeues the job.
func TestLockLoopRetriesAfterASnapshotRace(t *testing.T) {
	ctx := testdb.Context(t)
	pool := testdb.New(t)
	dead := deadLettered(t, ctx, pool, runledger.Global())

	defer failpoint.Enable(txn.FailpointAfterBegin, onBegin(func(n int) {
		switch n {
		case 1:
			race(t, ctx, pool, dead.ID)
		case 2:
			undo(t, pool, dead.ID)
		}
	}))()
	var misses []int
	defer failpoint.Enable(requeue.FailpointAfterLockMiss, onJob(dead.ID, func(attempt int) {
		misses = append(misses, attempt)
	}))()
	if testdb.Citus() {
		// Citus runs the statement in steps, the lock first and the final
		// read after it, each with a snapshot of its own: the miss is
		// classified after the lock, from the change itself.
		out, err := requeue.Job(ctx, pool, request(t, dead, "r"))
		if m, ok := out.(requeue.ExpectationMismatch); err != nil || !ok || m.Actual.RunNumber != 9 || len(misses) != 1 {
			t.Fatalf("%T %+v, %v after lock misses %v: want a mismatch at run 9 at the first attempt", out, out, err, misses)
		}
		return
	}
	got := mustRequeued(t)(requeue.Job(ctx, pool, request(t, dead, "r")))
	if got.Disposition != runledger.DispositionInserted || len(misses) != 1 || misses[0] != 1 || requeuedEvents(t, pool, dead.ID) != 1 {
		t.Fatalf("%+v after lock misses %v, %d events: want inserted at the second attempt, one event", got, misses, requeuedEvents(t, pool, dead.ID))
	}
}

// In a caller's transaction the missed attempt keeps the changed row
// locked, so the next attempt sees the change itself: the race costs one
// more round trip and ends in the change's verdict (here a mismatch at
// run 9), never a loop. On Citus the first attempt already gives it.
func TestLockLoopInCallersTransactionSeesTheChange(t *testing.T) {
	ctx := testdb.Context(t)
	pool := testdb.New(t)
	dead := deadLettered(t, ctx, pool, runledger.Global())
	var misses []int
	defer failpoint.Enable(requeue.FailpointAfterLockMiss, onJob(dead.ID, func(attempt int) {
		misses = append(misses, attempt)
	}))()
	testdb.InTx(t, ctx, pool, func(tx pgx.Tx) {
		race(t, ctx, pool, dead.ID)
		out, err := requeue.JobTx(ctx, tx, request(t, dead, "r"))
		m, ok := out.(requeue.ExpectationMismatch)
		attempts := 2
		if testdb.Citus() {
			attempts = 1 // the miss is classified after the lock (see above)
		}
		if err != nil || !ok || m.Actual.RunNumber != 9 || len(misses) != attempts {
			t.Fatalf("JobTx: %T %+v, %v after misses %v; want a mismatch at run 9 after %d attempts", out, out, err, misses, attempts)
		}
	})
}

// The loop is bounded: when every attempt loses the race, the call fails
// with job.requeue_target_unstable after MaxLockAttempts attempts, writing
// nothing.
func TestLockLoopIsBounded(t *testing.T) {
	if testdb.Citus() {
		t.Skip("on Citus the miss is classified after the lock, so no attempt is made again")
	}
	ctx := testdb.Context(t)
	pool := testdb.New(t)
	dead := deadLettered(t, ctx, pool, runledger.Global())

	defer failpoint.Enable(txn.FailpointAfterBegin, onBegin(func(n int) {
		if n > 1 {
			undo(t, pool, dead.ID)
		}
		race(t, ctx, pool, dead.ID)
	}))()
	attempts := 0
	defer failpoint.Enable(requeue.FailpointAfterLockMiss, onJob(dead.ID, func(int) { attempts++ }))()

	_, err := requeue.Job(ctx, pool, request(t, dead, "r"))
	wantCode(t, err, requeue.CodeTargetUnstable)
	if attempts != requeue.MaxLockAttempts || requeuedEvents(t, pool, dead.ID) != 0 {
		t.Fatalf("%d attempts, %d events; want %d and none", attempts, requeuedEvents(t, pool, dead.ID), requeue.MaxLockAttempts)
	}
}
