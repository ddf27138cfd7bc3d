package requeue_test

import (
	"context"
	"errors"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/internal/failpoint"
	"github.com/runledger-go/runledger/internal/testdb"
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

// The snapshot race: the locking update misses because a workflow step
// owns the job; the step lets go before the classification read, which
// then sees the job requeueable as observed: the loop tries again and the
// second attempt requeues it.
func TestLockLoopRetriesAfterASnapshotRace(t *testing.T) {
	ctx := testdb.Context(t)
	pool := testdb.New(t)
	dead := deadLettered(t, ctx, pool, runledger.Global())
	testdb.OwnByWorkflowStep(t, pool, dead.ID)

	var misses []int
	defer failpoint.Enable(requeue.FailpointAfterLockMiss, onJob(dead.ID, func(attempt int) {
		misses = append(misses, attempt)
		// Committed on another connection: the next statement sees it.
		testdb.Exec(t, pool, `UPDATE workflow_steps SET job_id = NULL WHERE job_id = $1`, dead.ID)
	}))()
	got := mustRequeued(t)(requeue.Job(ctx, pool, request(t, dead, "r")))
	if got.Disposition != runledger.DispositionInserted || len(misses) != 1 || misses[0] != 1 {
		t.Fatalf("%+v after lock misses %v: want inserted at the second attempt", got, misses)
	}
}

// The loop is bounded: when every attempt's locking update misses and
// every classification read then sees the job requeueable, the call fails
// with job.requeue_target_unstable, writing nothing, in both entry points.
func TestLockLoopIsBounded(t *testing.T) {
	ctx := testdb.Context(t)
	pool := testdb.New(t)
	dead := deadLettered(t, ctx, pool, runledger.Global())
	run := uuid.New()
	testdb.Exec(t, pool, `INSERT INTO workflow_runs (id, workflow_type) VALUES ($1, 'wf')`, run)
	testdb.Exec(t, pool, `INSERT INTO workflow_steps (workflow_run_id, step_key, job_id) VALUES ($1, 'only', $2)`, run, dead.ID)

	// The step lets go after each miss and takes the job again at the
	// next attempt's start (txn's after-begin point is only in an owned
	// transaction's first batch, so the hook re-owns it after the read).
	attempts := 0
	defer failpoint.Enable(requeue.FailpointAfterLockMiss, onJob(dead.ID, func(int) {
		attempts++
		testdb.Exec(t, pool, `UPDATE workflow_steps SET job_id = NULL WHERE workflow_run_id = $1`, run)
	}))()
	defer failpoint.Enable(requeue.FailpointAfterClassification, onJob(dead.ID, func(int) {
		testdb.Exec(t, pool, `UPDATE workflow_steps SET job_id = $2 WHERE workflow_run_id = $1`, run, dead.ID)
	}))()

	_, err := requeue.Job(ctx, pool, request(t, dead, "r"))
	wantCode(t, err, requeue.CodeTargetUnstable)
	if attempts != requeue.MaxLockAttempts || requeuedEvents(t, pool, dead.ID) != 0 {
		t.Fatalf("%d attempts, %d events; want %d and none", attempts, requeuedEvents(t, pool, dead.ID), requeue.MaxLockAttempts)
	}
	attempts = 0
	testdb.InTx(t, ctx, pool, func(tx pgx.Tx) {
		_, err := requeue.JobTx(ctx, tx, request(t, dead, "r"))
		if !errors.Is(err, requeue.CodeTargetUnstable) || attempts != requeue.MaxLockAttempts {
			t.Fatalf("JobTx: %v after %d attempts", err, attempts)
		}
	})
}
