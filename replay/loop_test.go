package replay_test

import (
	"context"
	"errors"
	"testing"

	"github.com/google/uuid"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/internal/failpoint"
	"github.com/runledger-go/runledger/internal/testdb"
	"github.com/runledger-go/runledger/replay"
)

// These tests drive the lock loop's retry branch: the locking read misses
// because a workflow step owns the source, and the step lets go before the
// unlocked read, which then sees an eligible source. They install
// process-wide failpoints, so they do not run in parallel (parallel tests
// start only after the sequential ones finish) and their hooks ignore other
// sources.

func onSource(source uuid.UUID, fn func(attempt int)) failpoint.Hook {
	return func(_ context.Context, arg any) {
		if c, ok := arg.(replay.FailpointCall); ok && c.SourceJobID == source {
			fn(c.Attempt)
		}
	}
}

func TestLockLoopRetriesWhenTheSourceBecomesEligibleBetweenStatements(t *testing.T) {
	ctx := testdb.Context(t)
	pool := testdb.New(t)
	sourceID := testdb.Seed(t, pool, testdb.Succeeded(runledger.Global()))
	ownBySingleStepWorkflow(t, pool, sourceID)

	var locks, misses []int
	defer failpoint.Enable(replay.FailpointBeforeSourceLock, onSource(sourceID, func(attempt int) {
		locks = append(locks, attempt)
	}))()
	defer failpoint.Enable(replay.FailpointAfterLockMiss, onSource(sourceID, func(attempt int) {
		misses = append(misses, attempt)
		// Committed on another connection: the next statement sees it.
		testdb.Exec(t, pool, `UPDATE workflow_steps SET job_id = NULL WHERE job_id = $1`, sourceID)
	}))()

	got := testdb.MustReplayed(t)(replay.SucceededJob(ctx, pool, replay.Request{SourceJobID: sourceID, ExpectedRunNumber: 1, Key: "k", Reason: "r"}))
	if got.Disposition != runledger.DispositionInserted {
		t.Fatalf("%+v", got)
	}
	if len(locks) != 2 || locks[0] != 1 || locks[1] != 2 || len(misses) != 1 || misses[0] != 1 {
		t.Fatalf("locking reads %v, misses %v: want reads [1 2] and one miss", locks, misses)
	}
}

func TestLockLoopGivesUpAfterItsBound(t *testing.T) {
	ctx := testdb.Context(t)
	pool := testdb.New(t)
	sourceID := testdb.Seed(t, pool, testdb.Succeeded(runledger.Global()))
	testdb.Exec(t, pool, `INSERT INTO workflow_runs (id, workflow_type) VALUES ($1, 'wf')`, sourceID)
	testdb.Exec(t, pool, `INSERT INTO workflow_steps (workflow_run_id, step_key) VALUES ($1, 'flapping')`, sourceID)

	// Before every locking read a step takes the job, after every miss it
	// lets go: the source looks eligible to every unlocked read and to no
	// locking one.
	attempts := 0
	defer failpoint.Enable(replay.FailpointBeforeSourceLock, onSource(sourceID, func(attempt int) {
		attempts = attempt
		testdb.Exec(t, pool, `UPDATE workflow_steps SET job_id = $1 WHERE step_key = 'flapping'`, sourceID)
	}))()
	defer failpoint.Enable(replay.FailpointAfterLockMiss, onSource(sourceID, func(int) {
		testdb.Exec(t, pool, `UPDATE workflow_steps SET job_id = NULL WHERE step_key = 'flapping'`)
	}))()

	out, err := replay.SucceededJob(ctx, pool, replay.Request{SourceJobID: sourceID, ExpectedRunNumber: 1, Key: "k", Reason: "r"})
	if out != nil || !errors.Is(err, runledger.CodeReplaySourceUnstable) {
		t.Fatalf("outcome %v err %v, want the unstable-source error", out, err)
	}
	e := testdb.WantCode(t, err, runledger.CodeReplaySourceUnstable)
	if e.Category != runledger.CategoryInternal {
		t.Fatalf("category %s", e.Category)
	}
	if attempts != replay.MaxSourceLockAttempts {
		t.Fatalf("%d locking reads, want the bound %d", attempts, replay.MaxSourceLockAttempts)
	}
	if n := testdb.Count(t, pool, "job_replays") + testdb.Count(t, pool, "job_events"); n != 0 {
		t.Fatal("the failed replay wrote lineage or events")
	}
}
