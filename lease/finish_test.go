package lease_test

import (
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/inspect"
	"github.com/runledger-go/runledger/internal/testdb"
	"github.com/runledger-go/runledger/jobs"
	"github.com/runledger-go/runledger/lease"
)

func TestCompleteStoresOutputProgressAndSucceededEvent(t *testing.T) {
	t.Parallel()
	ctx, pool := setup(t)
	l := testdb.Leased(t, ctx, pool, jobs.EnqueueRequest{})
	req := testdb.CompleteRequest(l)
	req.Output = json.RawMessage(`{"sent": 3,  "ids": ["a","b","c"]}`)
	req.ProgressDone, req.ProgressTotal = testdb.Ptr[int64](3), testdb.Ptr[int64](4)
	done, err := lease.Complete(ctx, pool, req)
	if err != nil {
		t.Fatal(err)
	}
	switch {
	case done.Status != runledger.JobStatusSucceeded, done.Stage != runledger.JobStageCompleted:
		t.Fatalf("completed job = %s %s, want SUCCEEDED completed", done.Status, done.Stage)
	case done.FinishedAt == nil, done.LeaseExpiresAt != nil:
		t.Fatalf("finished_at = %v lease_expires_at = %v, want set and cleared", done.FinishedAt, done.LeaseExpiresAt)
	case done.ProgressDone == nil || *done.ProgressDone != 3 || done.ProgressTotal == nil || *done.ProgressTotal != 4:
		t.Fatalf("progress = %v/%v, want 3/4", done.ProgressDone, done.ProgressTotal)
	case done.ProgressPct == nil || *done.ProgressPct != 75:
		t.Fatalf("progress_pct = %v, want 75", done.ProgressPct)
	}
	var out map[string]any
	if err := json.Unmarshal(done.Output, &out); err != nil || out["sent"] != float64(3) {
		t.Fatalf("output = %s (%v), want the stored object", done.Output, err)
	}
	typ, attempt, payload, _ := lastEvent(t, ctx, pool, l.ID)
	if typ != "SUCCEEDED" || attempt == nil || *attempt != 1 || payload["worker_id"] != "worker-1" {
		t.Fatalf("last event = %s attempt %v payload %v, want SUCCEEDED attempt 1 by worker-1", typ, attempt, payload)
	}
	var evDone, evTotal *int64
	if err := pool.QueryRow(ctx, `SELECT progress_done, progress_total FROM job_events WHERE job_id = $1 AND event_type = 'SUCCEEDED'`, l.ID).Scan(&evDone, &evTotal); err != nil {
		t.Fatal(err)
	}
	if evDone == nil || *evDone != 3 || evTotal == nil || *evTotal != 4 {
		t.Fatalf("event progress = %v/%v, want 3/4", evDone, evTotal)
	}

	// Without output the column stays NULL.
	l2 := testdb.Leased(t, ctx, pool, jobs.EnqueueRequest{})
	done2, err := lease.Complete(ctx, pool, testdb.CompleteRequest(l2))
	if err != nil {
		t.Fatal(err)
	}
	if done2.Output != nil || done2.ProgressDone != nil {
		t.Fatalf("output/progress = %s/%v, want NULL", done2.Output, done2.ProgressDone)
	}
}

func TestCompleteRejectsLeaseMismatchWithoutWriting(t *testing.T) {
	t.Parallel()
	ctx, pool := setup(t)
	l := testdb.Leased(t, ctx, pool, jobs.EnqueueRequest{})
	pending := testdb.Enqueue(t, ctx, pool, jobs.EnqueueRequest{RunAt: testdb.Ptr(time.Now().Add(time.Hour))})
	good := testdb.CompleteRequest(l)
	cases := map[string]lease.CompleteRequest{
		"wrong run":     {JobID: l.ID, RunNumber: 2, Attempt: good.Attempt, WorkerID: good.WorkerID},
		"wrong attempt": {JobID: l.ID, RunNumber: good.RunNumber, Attempt: 2, WorkerID: good.WorkerID},
		"wrong worker":  {JobID: l.ID, RunNumber: good.RunNumber, Attempt: good.Attempt, WorkerID: "worker-2"},
		"not leased":    {JobID: pending.ID, RunNumber: 1, Attempt: 0, WorkerID: "worker-1"},
	}
	for name, req := range cases {
		t.Run(name, func(t *testing.T) {
			before := testdb.Scalar[int](t, pool, `SELECT count(*) FROM job_events`)
			_, err := lease.Complete(ctx, pool, req)
			testdb.WantCode(t, err, runledger.CodeLeaseMismatch)
			if after := testdb.Scalar[int](t, pool, `SELECT count(*) FROM job_events`); after != before {
				t.Fatalf("events %d -> %d after a refused completion", before, after)
			}
			if n := testdb.Scalar[int](t, pool, `SELECT count(*) FROM job_queue WHERE status = 'SUCCEEDED'`); n != 0 {
				t.Fatalf("%d jobs SUCCEEDED after a refused completion", n)
			}
		})
	}
	// The right lease still completes, once; the second time it no longer
	// holds the lease.
	if _, err := lease.Complete(ctx, pool, good); err != nil {
		t.Fatal(err)
	}
	_, err := lease.Complete(ctx, pool, good)
	testdb.WantCode(t, err, runledger.CodeLeaseMismatch)
	if ev := testdb.EventTypes(t, pool, l.ID); !slices.Equal(ev, []string{"ENQUEUED", "LEASED", "SUCCEEDED"}) {
		t.Fatalf("events = %v, want one SUCCEEDED", ev)
	}
}

func TestCompleteMissingJobIsNotFound(t *testing.T) {
	t.Parallel()
	ctx, pool := setup(t)
	_, err := lease.Complete(ctx, pool, lease.CompleteRequest{JobID: uuid.New(), RunNumber: 1, Attempt: 1, WorkerID: "w"})
	testdb.WantCode(t, err, runledger.CodeJobNotFound)
	if n := testdb.Scalar[int](t, pool, `SELECT count(*) FROM job_events`); n != 0 {
		t.Fatalf("%d events written", n)
	}
}

func TestCompleteTxRunsInCallerTransaction(t *testing.T) {
	t.Parallel()
	ctx, pool := setup(t)
	l := testdb.Leased(t, ctx, pool, jobs.EnqueueRequest{})
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lease.CompleteTx(ctx, tx, testdb.CompleteRequest(l)); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	j, err := inspect.Get(ctx, pool, runledger.Global(), l.ID)
	if err != nil {
		t.Fatal(err)
	}
	if j.Status != runledger.JobStatusLeased {
		t.Fatalf("status after the caller rolled back = %s, want LEASED", j.Status)
	}
}

func TestFailWithAttemptsLeftSchedulesRetry(t *testing.T) {
	t.Parallel()
	ctx, pool := setup(t)
	l := testdb.Leased(t, ctx, pool, jobs.EnqueueRequest{MaxAttempts: testdb.Ptr[int32](3)})
	after, err := lease.Fail(ctx, pool, testdb.FailRequest(l))
	if err != nil {
		t.Fatal(err)
	}
	switch {
	case after.Status != runledger.JobStatusPending, after.Stage != runledger.JobStageScheduled:
		t.Fatalf("job after failure = %s %s, want PENDING scheduled", after.Status, after.Stage)
	case after.WorkerID != nil, after.LeaseExpiresAt != nil, after.FinishedAt != nil:
		t.Fatalf("worker %v lease %v finished %v, want all cleared", after.WorkerID, after.LeaseExpiresAt, after.FinishedAt)
	case after.Attempt != 1:
		t.Fatalf("attempt = %d, want 1 (the next claim starts attempt 2)", after.Attempt)
	case after.LastErrorCode == nil || *after.LastErrorCode != "smtp.down" || after.LastErrorMessage == nil:
		t.Fatalf("last error = %v %v", after.LastErrorCode, after.LastErrorMessage)
	}
	typ, attempt, payload, occurred := lastEvent(t, ctx, pool, l.ID)
	if typ != "RETRY_SCHEDULED" || attempt == nil || *attempt != 1 ||
		payload["failure_kind"] != "RETRYABLE" || payload["error_code"] != "smtp.down" {
		t.Fatalf("last event = %s attempt %v payload %v", typ, attempt, payload)
	}
	// The event's occurred_at is the failing statement's now().
	if d := after.NextRunAt.Sub(occurred); d != lease.Backoff(1) {
		t.Fatalf("next_run_at = now + %s, want now + Backoff(1) = %s", d, lease.Backoff(1))
	}
	// Not due yet: a claim finds nothing.
	if got := testdb.Claim(t, ctx, pool, lease.ClaimRequest{}); len(got) != 0 {
		t.Fatalf("claimed %v before the retry was due", testdb.IDs(got))
	}

	// An explicit delay replaces the backoff.
	testdb.Exec(t, pool, `UPDATE job_queue SET next_run_at = now() WHERE id = $1`, l.ID)
	l2 := claimOnly(t, ctx, pool, l.ID)
	req := testdb.FailRequest(l2)
	req.RetryDelay = testdb.Ptr(90 * time.Second)
	after2, err := lease.Fail(ctx, pool, req)
	if err != nil {
		t.Fatal(err)
	}
	_, _, _, occurred2 := lastEvent(t, ctx, pool, l.ID)
	if d := after2.NextRunAt.Sub(occurred2); d != 90*time.Second {
		t.Fatalf("next_run_at = now + %s, want now + 90s", d)
	}
}

func TestFailUntilAttemptsSpentDeadLetters(t *testing.T) {
	t.Parallel()
	ctx, pool := setup(t)
	j := testdb.Enqueue(t, ctx, pool, jobs.EnqueueRequest{MaxAttempts: testdb.Ptr[int32](2)})
	var last runledger.Job
	for attempt := int32(1); attempt <= 2; attempt++ {
		l := claimOnly(t, ctx, pool, j.ID)
		if l.Attempt != attempt {
			t.Fatalf("claim %d leased attempt %d", attempt, l.Attempt)
		}
		req := testdb.FailRequest(l)
		req.RetryDelay = testdb.Ptr(time.Duration(0))
		var err error
		if last, err = lease.Fail(ctx, pool, req); err != nil {
			t.Fatal(err)
		}
	}
	if last.Status != runledger.JobStatusDeadLettered || last.FinishedAt == nil {
		t.Fatalf("after the last attempt failed: %s finished %v, want DEAD_LETTERED and finished", last.Status, last.FinishedAt)
	}
	want := []string{"ENQUEUED", "LEASED", "RETRY_SCHEDULED", "LEASED", "DEAD_LETTERED"}
	if ev := testdb.EventTypes(t, pool, j.ID); !slices.Equal(ev, want) {
		t.Fatalf("events = %v, want %v", ev, want)
	}
	if got := testdb.Claim(t, ctx, pool, lease.ClaimRequest{}); len(got) != 0 {
		t.Fatalf("claimed a dead-lettered job: %v", testdb.IDs(got))
	}
}

func TestFailTerminalDeadLettersAtOnce(t *testing.T) {
	t.Parallel()
	ctx, pool := setup(t)
	l := testdb.Leased(t, ctx, pool, jobs.EnqueueRequest{MaxAttempts: testdb.Ptr[int32](5)})
	req := testdb.FailRequest(l)
	req.Terminal = true
	after, err := lease.Fail(ctx, pool, req)
	if err != nil {
		t.Fatal(err)
	}
	if after.Status != runledger.JobStatusDeadLettered {
		t.Fatalf("status = %s, want DEAD_LETTERED with 4 attempts left", after.Status)
	}
	typ, _, payload, _ := lastEvent(t, ctx, pool, l.ID)
	if typ != "DEAD_LETTERED" || payload["failure_kind"] != "TERMINAL" {
		t.Fatalf("last event = %s %v, want DEAD_LETTERED TERMINAL", typ, payload)
	}
}

func TestFailRejectsLeaseMismatchWithoutWriting(t *testing.T) {
	t.Parallel()
	ctx, pool := setup(t)
	l := testdb.Leased(t, ctx, pool, jobs.EnqueueRequest{})
	req := testdb.FailRequest(l)
	req.WorkerID = "someone-else"
	_, err := lease.Fail(ctx, pool, req)
	testdb.WantCode(t, err, runledger.CodeLeaseMismatch)
	_, err = lease.Fail(ctx, pool, lease.FailRequest{JobID: uuid.New(), RunNumber: 1, Attempt: 1, WorkerID: "w"})
	testdb.WantCode(t, err, runledger.CodeJobNotFound)
	if ev := testdb.EventTypes(t, pool, l.ID); !slices.Equal(ev, []string{"ENQUEUED", "LEASED"}) {
		t.Fatalf("events = %v after refused failures", ev)
	}
}

func TestBackoffDoublesFromOneSecondUpToAnHour(t *testing.T) {
	t.Parallel()
	cases := map[int32]time.Duration{
		-1: time.Second, 0: time.Second, 1: time.Second, 2: 2 * time.Second, 3: 4 * time.Second,
		10: 512 * time.Second, 12: 2048 * time.Second, 13: time.Hour, 100: time.Hour, 1 << 30: time.Hour,
	}
	for attempt, want := range cases {
		if got := lease.Backoff(attempt); got != want {
			t.Errorf("Backoff(%d) = %s, want %s", attempt, got, want)
		}
	}
}
