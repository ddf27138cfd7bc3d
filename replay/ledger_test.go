package replay_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/inspect"
	"github.com/runledger-go/runledger/internal/testdb"
	"github.com/runledger-go/runledger/jobs"
	"github.com/runledger-go/runledger/lease"
	"github.com/runledger-go/runledger/replay"
)

// These tests make sources the way an application does, through package
// jobs: enqueue, claim, complete.

// runToSuccess enqueues a job and drives it to SUCCEEDED through a worker.
func runToSuccess(t *testing.T, ctx context.Context, pool *pgxpool.Pool, req jobs.EnqueueRequest, output string) runledger.Job {
	t.Helper()
	enq, err := jobs.Enqueue(ctx, pool, req)
	if err != nil {
		t.Fatalf("enqueue: %v", err)
	}
	return completeJob(t, ctx, pool, enq.Job.ID, output)
}

// completeJob claims the given job (it must be the only claimable one of its
// type) and completes it.
func completeJob(t *testing.T, ctx context.Context, pool *pgxpool.Pool, id uuid.UUID, output string) runledger.Job {
	t.Helper()
	job, err := inspect.Get(ctx, pool, mustScope(t, ctx, pool, id), id)
	if err != nil {
		t.Fatal(err)
	}
	claimed, err := lease.Claim(ctx, pool, lease.ClaimRequest{WorkerID: "worker-1", JobTypes: []string{job.JobType}, Limit: 10, Lease: time.Minute})
	if err != nil || len(claimed) != 1 || claimed[0].ID != id {
		t.Fatalf("claim: %v %v, want job %s", claimed, err, id)
	}
	done, err := lease.Complete(ctx, pool, lease.CompleteRequest{JobID: id, RunNumber: claimed[0].RunNumber, Attempt: claimed[0].Attempt,
		WorkerID: "worker-1", Output: json.RawMessage(output), ProgressDone: testdb.Ptr[int64](8), ProgressTotal: testdb.Ptr[int64](8)})
	if err != nil {
		t.Fatalf("complete: %v", err)
	}
	return done
}

func mustScope(t *testing.T, ctx context.Context, pool *pgxpool.Pool, id uuid.UUID) runledger.Scope {
	t.Helper()
	org := testdb.Scalar[*uuid.UUID](t, pool, `SELECT NULLIF(organization_id, '00000000-0000-0000-0000-000000000000') FROM job_queue WHERE id = $1`, id)
	return runledger.ScopeOf(org)
}

func TestReplayOfAKeyedSourceLeavesTheKeyWithTheSource(t *testing.T) {
	t.Parallel()
	ctx := testdb.Context(t)
	pool := testdb.New(t)
	testdb.Define(t, ctx, pool, jobs.DefinitionInput{JobType: "report"})
	org := uuid.New()
	keyed := jobs.EnqueueRequest{Scope: runledger.Organization(org), JobType: "report", Payload: json.RawMessage(`{"month":"2026-10"}`),
		Priority: testdb.Ptr[int32](77), MaxAttempts: testdb.Ptr[int32](5), TimeoutSeconds: testdb.Ptr[int32](123), IdempotencyKey: "report-2026-10"}
	source := runToSuccess(t, ctx, pool, keyed, `{"rows":42}`)
	testdb.Exec(t, pool, `UPDATE job_queue SET checkpoint = '{"page":8}' WHERE id = $1`, source.ID)
	before := testdb.Scalar[string](t, pool, sourceSnapshot, source.ID)

	got := testdb.MustReplayed(t)(replay.SucceededJob(ctx, pool, replay.Request{Scope: source.Scope(), SourceJobID: source.ID,
		ExpectedRunNumber: source.RunNumber, Key: "rerun", Reason: "numbers were wrong"}))
	if after := testdb.Scalar[string](t, pool, sourceSnapshot, source.ID); after != before {
		t.Fatal("replay changed the source")
	}
	replayJob, err := inspect.Get(ctx, pool, source.Scope(), got.Replay.JobID)
	if err != nil {
		t.Fatal(err)
	}
	if replayJob.IdempotencyKey != nil || replayJob.Priority != 77 || replayJob.MaxAttempts != 5 || replayJob.TimeoutSeconds != 123 ||
		replayJob.Checkpoint != nil || replayJob.Output != nil || replayJob.ProgressDone != nil {
		t.Fatalf("replay job %+v", replayJob)
	}
	if req := testdb.Scalar[*string](t, pool, `SELECT enqueue_request::text FROM job_queue WHERE id = $1`, got.Replay.JobID); req != nil {
		t.Fatalf("replay has a request snapshot %s", *req)
	}
	// The original keyed enqueue, retried, still finds the source.
	again, err := jobs.Enqueue(ctx, pool, keyed)
	if err != nil || again.Disposition != runledger.DispositionExisting || again.Job.ID != source.ID {
		t.Fatalf("retried keyed enqueue: %+v %v, want the source %s", again, err, source.ID)
	}
	// The replay runs like any job and can itself be replayed.
	done := completeJob(t, ctx, pool, got.Replay.JobID, `{"rows":43}`)
	second := testdb.MustReplayed(t)(replay.SucceededJob(ctx, pool, replay.Request{Scope: done.Scope(), SourceJobID: done.ID,
		ExpectedRunNumber: done.RunNumber, Key: "rerun", Reason: "again"}))
	if second.Disposition != runledger.DispositionInserted {
		t.Fatalf("replay of a replay: %+v", second)
	}
	from, err := replay.Origin(ctx, pool, done.Scope(), second.Replay.JobID)
	if err != nil || from == nil || from.SourceJobID != done.ID {
		t.Fatalf("lineage of the second replay: %+v %v", from, err)
	}
}

func TestReplayKeepsTheSourcesExecutionResource(t *testing.T) {
	t.Parallel()
	ctx := testdb.Context(t)
	pool := testdb.New(t)
	testdb.Define(t, ctx, pool, jobs.DefinitionInput{JobType: "print"})
	source := runToSuccess(t, ctx, pool, jobs.EnqueueRequest{JobType: "print", ExecutionResourceKey: "printer-7"}, `{}`)

	// Another job owns the printer.
	owner, err := jobs.Enqueue(ctx, pool, jobs.EnqueueRequest{JobType: "print", ExecutionResourceKey: "printer-7"})
	if err != nil {
		t.Fatal(err)
	}
	leased, err := lease.Claim(ctx, pool, lease.ClaimRequest{WorkerID: "w", Limit: 10, Lease: time.Minute})
	if err != nil || len(leased) != 1 || leased[0].ID != owner.Job.ID {
		t.Fatalf("owner claim: %v %v", leased, err)
	}

	got := testdb.MustReplayed(t)(replay.SucceededJob(ctx, pool, replay.Request{SourceJobID: source.ID, ExpectedRunNumber: 1, Key: "k", Reason: "r"}))
	if none, err := lease.Claim(ctx, pool, lease.ClaimRequest{WorkerID: "w2", Limit: 10, Lease: time.Minute}); err != nil || len(none) != 0 {
		t.Fatalf("claimed %v (%v) while the printer is held", none, err)
	}
	if _, err := lease.Complete(ctx, pool, lease.CompleteRequest{JobID: owner.Job.ID, RunNumber: 1, Attempt: 1, WorkerID: "w"}); err != nil {
		t.Fatal(err)
	}
	next, err := lease.Claim(ctx, pool, lease.ClaimRequest{WorkerID: "w2", Limit: 10, Lease: time.Minute})
	if err != nil || len(next) != 1 || next[0].ID != got.Replay.JobID || next[0].ExecutionResourceKey == nil || *next[0].ExecutionResourceKey != "printer-7" {
		t.Fatalf("after the owner finished: %v %v", next, err)
	}
}

func TestWorkerClaimSkipsAReplayHeldByAnExistingOutcome(t *testing.T) {
	t.Parallel()
	ctx := testdb.Context(t)
	pool := testdb.New(t)
	testdb.Define(t, ctx, pool, jobs.DefinitionInput{JobType: "sync"})
	source := runToSuccess(t, ctx, pool, jobs.EnqueueRequest{JobType: "sync"}, `{}`)
	req := replay.Request{SourceJobID: source.ID, ExpectedRunNumber: 1, Key: "k", Reason: "r"}
	first := testdb.MustReplayed(t)(replay.SucceededJob(ctx, pool, req))

	tx, pid := beginTx(t, ctx, pool)
	existing := testdb.MustReplayed(t)(replay.SucceededJobTx(ctx, tx, req))
	if existing.Disposition != runledger.DispositionExisting || existing.Replay.Status != runledger.JobStatusPending || existing.Replay.RunNumber != 1 {
		t.Fatalf("%+v", existing)
	}
	if holders := rowLockHolders(t, pool, first.Replay.JobID); len(holders) != 1 || holders[0] != pid {
		t.Fatalf("replay held by %v, want %d", holders, pid)
	}
	// Workers pass the held replay by instead of waiting.
	if claimed, err := lease.Claim(ctx, pool, lease.ClaimRequest{WorkerID: "w", Limit: 10, Lease: time.Minute}); err != nil || len(claimed) != 0 {
		t.Fatalf("claimed %v (%v) while an Existing outcome holds the replay", claimed, err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	claimed, err := lease.Claim(ctx, pool, lease.ClaimRequest{WorkerID: "w", Limit: 10, Lease: time.Minute})
	if err != nil || len(claimed) != 1 || claimed[0].ID != first.Replay.JobID || claimed[0].Status != runledger.JobStatusLeased || claimed[0].RunNumber != 1 {
		t.Fatalf("after commit: %v %v", claimed, err)
	}
}

func TestConflictingRequestDoesNotKeepWorkersFromTheReplay(t *testing.T) {
	t.Parallel()
	ctx := testdb.Context(t)
	pool := testdb.New(t)
	testdb.Define(t, ctx, pool, jobs.DefinitionInput{JobType: "sync"})
	source := runToSuccess(t, ctx, pool, jobs.EnqueueRequest{JobType: "sync"}, `{}`)
	first := testdb.MustReplayed(t)(replay.SucceededJob(ctx, pool, replay.Request{SourceJobID: source.ID, ExpectedRunNumber: 1, Key: "k", Reason: "r"}))

	tx, _ := beginTx(t, ctx, pool)
	_, err := replay.SucceededJobTx(ctx, tx, replay.Request{SourceJobID: source.ID, ExpectedRunNumber: 1, Key: "k", Reason: "different"})
	if !errors.Is(err, runledger.CodeReplayIdempotencyConflict) {
		t.Fatalf("%v", err)
	}
	claimed, err := lease.Claim(ctx, pool, lease.ClaimRequest{WorkerID: "w", Limit: 10, Lease: time.Minute})
	if err != nil || len(claimed) != 1 || claimed[0].ID != first.Replay.JobID {
		t.Fatalf("claim during the conflicting transaction: %v %v", claimed, err)
	}
}

func TestRetryReportsTheReplaysCurrentStateAfterItRan(t *testing.T) {
	t.Parallel()
	ctx := testdb.Context(t)
	pool := testdb.New(t)
	testdb.Define(t, ctx, pool, jobs.DefinitionInput{JobType: "sync"})
	source := runToSuccess(t, ctx, pool, jobs.EnqueueRequest{JobType: "sync"}, `{}`)
	req := replay.Request{SourceJobID: source.ID, ExpectedRunNumber: 1, Key: "k", Reason: "r"}
	first := testdb.MustReplayed(t)(replay.SucceededJob(ctx, pool, req))
	completeJob(t, ctx, pool, first.Replay.JobID, `{"ok":true}`)

	again := testdb.MustReplayed(t)(replay.SucceededJob(ctx, pool, req))
	if again.Disposition != runledger.DispositionExisting || again.Replay.Status != runledger.JobStatusSucceeded || again.Replay.RunNumber != 1 {
		t.Fatalf("%+v", again)
	}
	events, err := inspect.Events(ctx, pool, runledger.Global(), first.Replay.JobID)
	if err != nil {
		t.Fatal(err)
	}
	var kinds []runledger.JobEventType
	for _, e := range events {
		kinds = append(kinds, e.EventType)
	}
	if len(kinds) != 3 || kinds[0] != runledger.JobEventEnqueued || kinds[1] != runledger.JobEventLeased || kinds[2] != runledger.JobEventSucceeded {
		t.Fatalf("replay history %v", kinds)
	}
	var provenance map[string]any
	if err := json.Unmarshal(events[0].Payload, &provenance); err != nil || provenance["replayed_from_job_id"] != source.ID.String() ||
		provenance["replay_request_key"] != "k" || provenance["reason"] != "r" || provenance["replayed_from_run_number"] != float64(1) ||
		provenance["job_type"] != "sync" || len(provenance) != 5 {
		t.Fatalf("ENQUEUED provenance %s (%v)", events[0].Payload, err)
	}
	if src, err := inspect.Get(ctx, pool, runledger.Global(), source.ID); err != nil || src.Status != runledger.JobStatusSucceeded {
		t.Fatalf("source after its replay ran: %+v %v", src, err)
	}
}

func TestWorkflowStepJobCannotBeReplayedDirectly(t *testing.T) {
	t.Parallel()
	ctx := testdb.Context(t)
	pool := testdb.New(t)
	testdb.Define(t, ctx, pool, jobs.DefinitionInput{JobType: "step"})
	step, err := jobs.EnqueueWorkflowStep(ctx, pool, jobs.WorkflowStepRequest{WorkflowType: "onboarding", StepKey: "only", Job: jobs.EnqueueRequest{JobType: "step"}})
	if err != nil {
		t.Fatal(err)
	}
	completeJob(t, ctx, pool, step.Job.ID, `{}`)
	_, err = replay.SucceededJob(ctx, pool, replay.Request{SourceJobID: step.Job.ID, ExpectedRunNumber: 1, Key: "k", Reason: "r"})
	if e := testdb.WantCode(t, err, runledger.CodeWorkflowManaged); e.Message != "Workflow-managed jobs cannot be requeued directly." {
		t.Fatalf("%+v", e)
	}
}
