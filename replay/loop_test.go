package replay_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/internal/failpoint"
	"github.com/runledger-go/runledger/internal/testdb"
	"github.com/runledger-go/runledger/internal/txn"
	"github.com/runledger-go/runledger/replay"
)

// These tests drive the lock loop's retry branch: the locking read misses
// because a workflow step owns the source, the step lets go before the
// classification read, which then sees an eligible source, and takes the
// source again before the insert, which re-checks it and writes nothing.
// They install process-wide failpoints, so they do not run in parallel
// (parallel tests start only after the sequential ones finish) and their
// hooks ignore other sources.

func onSource(source uuid.UUID, fn func(attempt int)) failpoint.Hook {
	return func(_ context.Context, arg any) {
		if c, ok := arg.(replay.FailpointCall); ok && c.SourceJobID == source {
			fn(c.Attempt)
		}
	}
}

// The insert re-checks the source in a snapshot of its own and locks it:
// a source that became eligible after the locking read missed is
// replayed in the same attempt.
func TestInsertTakesASourceThatBecameEligibleAfterTheLockingRead(t *testing.T) {
	ctx := testdb.Context(t)
	pool := testdb.New(t)
	sourceID := testdb.Seed(t, pool, testdb.Succeeded(runledger.Global()))
	ownBySingleStepWorkflow(t, pool, sourceID)

	var misses []int
	defer failpoint.Enable(replay.FailpointAfterLockMiss, onSource(sourceID, func(attempt int) {
		misses = append(misses, attempt)
		// Committed on another connection: the next statement sees it.
		testdb.Exec(t, pool, `UPDATE workflow_steps SET job_id = NULL WHERE job_id = $1`, sourceID)
	}))()

	got := testdb.MustReplayed(t)(replay.SucceededJob(ctx, pool, replay.Request{SourceJobID: sourceID, ExpectedRunNumber: 1, Key: "k", Reason: "r"}))
	if got.Disposition != runledger.DispositionInserted || len(misses) != 1 || misses[0] != 1 {
		t.Fatalf("%+v after lock misses %v: want inserted in the first attempt", got, misses)
	}
}

func TestLockLoopRetriesWhenOnlyTheUnlockedReadSawTheSourceEligible(t *testing.T) {
	ctx := testdb.Context(t)
	pool := testdb.New(t)
	sourceID := testdb.Seed(t, pool, testdb.Succeeded(runledger.Global()))
	run := testdb.OwnByWorkflowStep(t, pool, sourceID)

	var misses, classified []int
	defer failpoint.Enable(replay.FailpointAfterLockMiss, onSource(sourceID, func(attempt int) {
		misses = append(misses, attempt)
		testdb.Exec(t, pool, `UPDATE workflow_steps SET job_id = NULL WHERE workflow_run_id = $1`, run)
	}))()
	defer failpoint.Enable(replay.FailpointAfterClassification, onSource(sourceID, func(attempt int) {
		classified = append(classified, attempt)
		if attempt == 1 { // the step takes the source back before the first insert only
			testdb.Exec(t, pool, `UPDATE workflow_steps SET job_id = $2 WHERE workflow_run_id = $1`, run, sourceID)
		}
	}))()

	got := testdb.MustReplayed(t)(replay.SucceededJob(ctx, pool, replay.Request{SourceJobID: sourceID, ExpectedRunNumber: 1, Key: "k", Reason: "r"}))
	if got.Disposition != runledger.DispositionInserted {
		t.Fatalf("%+v", got)
	}
	if len(misses) != 2 || misses[1] != 2 || len(classified) != 2 || classified[1] != 2 {
		t.Fatalf("lock misses %v, classifications %v: want attempts [1 2] of each", misses, classified)
	}
}

func TestLockLoopGivesUpAfterItsBound(t *testing.T) {
	ctx := testdb.Context(t)
	pool := testdb.New(t)
	sourceID := testdb.Seed(t, pool, testdb.Succeeded(runledger.Global()))
	testdb.Exec(t, pool, `INSERT INTO workflow_runs (id, workflow_type) VALUES ($1, 'wf')`, sourceID)
	testdb.Exec(t, pool, `INSERT INTO workflow_steps (workflow_run_id, step_key) VALUES ($1, 'flapping')`, sourceID)

	// Before every locking read and every insert a step takes the job,
	// after every lock miss it lets go: the source looks eligible to every
	// classification read and to no locking read or insert.
	attempts := 0
	take := func(attempt int) {
		attempts = attempt
		testdb.Exec(t, pool, `UPDATE workflow_steps SET job_id = $1 WHERE step_key = 'flapping'`, sourceID)
	}
	defer failpoint.Enable(replay.FailpointBeforeSourceLock, onSource(sourceID, take))()
	defer failpoint.Enable(replay.FailpointAfterLockMiss, onSource(sourceID, func(int) {
		testdb.Exec(t, pool, `UPDATE workflow_steps SET job_id = NULL WHERE step_key = 'flapping'`)
	}))()
	defer failpoint.Enable(replay.FailpointAfterClassification, onSource(sourceID, take))()

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

// raceForTheSource arranges for the next call replaying req to lose the
// source to a concurrent replay of the same request: after its
// classification read the source's workflow step lets go, another
// transaction replays the source and commits once the call's insert waits
// for it. It returns that replay's outcome and the commit's error, to read
// after the call.
func raceForTheSource(t *testing.T, ctx context.Context, pool *pgxpool.Pool, run uuid.UUID, req replay.Request) func() (replay.Replayed, error) {
	var winner replay.Replayed
	committed := make(chan error, 1)
	raced := false
	t.Cleanup(failpoint.Enable(replay.FailpointAfterClassification, onSource(req.SourceJobID, func(int) {
		if raced {
			return
		}
		raced = true
		testdb.Exec(t, pool, `UPDATE workflow_steps SET job_id = NULL WHERE workflow_run_id = $1`, run)
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		winner = testdb.MustReplayed(t)(replay.SucceededJobTx(ctx, tx, req))
		go func() {
			for {
				var waiting bool
				if err := pool.QueryRow(ctx, `SELECT EXISTS (`+testdb.WaitersSQL()+`)`).Scan(&waiting); err != nil {
					committed <- err
					return
				}
				if waiting {
					committed <- tx.Commit(ctx)
					return
				}
				time.Sleep(time.Millisecond)
			}
		}()
	})))
	return func() (replay.Replayed, error) { return winner, <-committed }
}

// An insert that waited for the source behind a concurrent replay of the
// same request took its snapshot before that replay committed: it writes
// a lineage row the unique key refuses. The owned transaction rolls back
// and tries again, and the next attempt's lookup finds the concurrent
// replay: one replay, Existing for the loser.
func TestInsertThatLostTheRaceForTheSourceTriesAgain(t *testing.T) {
	ctx := testdb.Context(t)
	pool := testdb.New(t)
	sourceID := testdb.Seed(t, pool, testdb.Succeeded(runledger.Global()))
	req := replay.Request{SourceJobID: sourceID, ExpectedRunNumber: 1, Key: "k", Reason: "r"}
	winner := raceForTheSource(t, ctx, pool, testdb.OwnByWorkflowStep(t, pool, sourceID), req)
	begins := 0
	defer failpoint.Enable(txn.FailpointAfterBegin, func(_ context.Context, arg any) {
		if c, ok := arg.(txn.FailpointCall); ok && c.Op == "successful job replay" {
			begins++
		}
	})()

	got := testdb.MustReplayed(t)(replay.SucceededJob(ctx, pool, req))
	won, err := winner()
	if err != nil {
		t.Fatalf("the concurrent replay: %v", err)
	}
	if begins != 2 {
		t.Fatalf("%d transactions begun, want 2: the refused insert's, and the retry's", begins)
	}
	if won.Disposition != runledger.DispositionInserted || got.Disposition != runledger.DispositionExisting || got.Replay.JobID != won.Replay.JobID {
		t.Fatalf("winner %+v, this call %+v: want one replay, existing for this call", won, got)
	}
	if n := testdb.Count(t, pool, "job_replays"); n != 1 {
		t.Fatalf("%d lineage rows, want 1", n)
	}
}

// In the caller's transaction, which the refused insert aborted, the same
// race is a Transient error: roll back and retry.
func TestInsertThatLostTheRaceInACallersTransactionIsTransient(t *testing.T) {
	ctx := testdb.Context(t)
	pool := testdb.New(t)
	sourceID := testdb.Seed(t, pool, testdb.Succeeded(runledger.Global()))
	req := replay.Request{SourceJobID: sourceID, ExpectedRunNumber: 1, Key: "k", Reason: "r"}
	winner := raceForTheSource(t, ctx, pool, testdb.OwnByWorkflowStep(t, pool, sourceID), req)

	tx, _ := beginTx(t, ctx, pool)
	_, err := replay.SucceededJobTx(ctx, tx, req)
	testdb.WantCode(t, err, runledger.CodeTransient)
	_ = tx.Rollback(ctx)
	won, err := winner()
	if err != nil {
		t.Fatalf("the concurrent replay: %v", err)
	}
	got := testdb.MustReplayed(t)(replay.SucceededJob(ctx, pool, req))
	if got.Disposition != runledger.DispositionExisting || got.Replay.JobID != won.Replay.JobID {
		t.Fatalf("retry %+v, want the concurrent replay %s", got, won.Replay.JobID)
	}
}
