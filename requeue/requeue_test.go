package requeue_test

import (
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/internal/testdb"
	"github.com/runledger-go/runledger/jobs"
	"github.com/runledger-go/runledger/lease"
	"github.com/runledger-go/runledger/requeue"
)

// A dead-lettered job is requeued in place: same id, the next run,
// PENDING, queued, due now, attempt 0, progress and checkpoint kept,
// everything of the last run cleared, status_reason the reason, and one
// REQUEUED event for the old run with the exact three-key payload. The
// same request again is Existing and writes nothing; another reason is a
// mismatch; a worker then claims and runs the job at run 2.
func TestRequeueDeadLetteredInPlaceAndIdempotently(t *testing.T) {
	t.Parallel()
	ctx := testdb.Context(t)
	pool := testdb.New(t)
	org := runledger.Organization(uuid.New())
	dead := deadLettered(t, ctx, pool, org)

	got := mustRequeued(t)(requeue.Job(ctx, pool, request(t, dead, "provider back")))
	if got.Disposition != runledger.DispositionInserted || got.Before == nil || got.EventID == nil {
		t.Fatalf("first requeue %+v, want inserted with before and event", got)
	}
	b, a := *got.Before, got.After
	if b.Status != runledger.JobStatusDeadLettered || b.RunNumber != 1 || b.Attempt != 1 || b.FinishedAt == nil || b.LastErrorCode == nil {
		t.Fatalf("before = %+v", b)
	}
	switch {
	case a.ID != dead.ID || a.Status != runledger.JobStatusPending || a.Stage != runledger.JobStageQueued || a.RunNumber != 2 || a.Attempt != 0:
		t.Fatalf("after = %+v, want the same job PENDING, queued, run 2, attempt 0", a)
	case a.ProgressDone == nil || *a.ProgressDone != 3 || a.ProgressTotal == nil || *a.ProgressTotal != 8 || string(a.Checkpoint) != `{"cursor": 3}`:
		t.Fatalf("after progress %v/%v checkpoint %s, want 3/8 and the checkpoint kept", a.ProgressDone, a.ProgressTotal, a.Checkpoint)
	case a.Output != nil || a.LeaseExpiresAt != nil || a.LastHeartbeatAt != nil || a.WorkerID != nil || a.StartedAt != nil ||
		a.FinishedAt != nil || a.LastErrorCode != nil || a.LastErrorMessage != nil:
		t.Fatalf("after = %+v, want output, lease, heartbeat, worker, times and last error cleared", a)
	case a.StatusReason == nil || *a.StatusReason != "provider back":
		t.Fatalf("status_reason = %v", a.StatusReason)
	case string(a.Payload) != string(b.Payload) || a.MaxAttempts != 1 || a.JobType != "charge.capture":
		t.Fatalf("after payload/settings changed: %+v", a)
	case time.Since(a.NextRunAt) > time.Minute || a.NextRunAt.After(time.Now().Add(time.Minute)):
		t.Fatalf("next_run_at = %s, want now", a.NextRunAt)
	}
	var run, attempt *int32
	var payload string
	var stage *string
	if err := pool.QueryRow(ctx, `SELECT run_number, attempt, stage, payload::text FROM job_events WHERE id = $1 AND job_id = $2 AND event_type = 'REQUEUED'`,
		*got.EventID, dead.ID).Scan(&run, &attempt, &stage, &payload); err != nil {
		t.Fatalf("read REQUEUED event: %v", err)
	}
	if *run != 1 || attempt == nil || *attempt != 1 || stage != nil {
		t.Fatalf("event run %v attempt %v stage %v, want 1, 1, NULL", *run, attempt, stage)
	}
	testdb.JSONEqual(t, "REQUEUED payload", []byte(payload),
		`{"reason":"provider back","state_policy":"preserve_progress_and_checkpoint","requeue_kind":"COMPARE_AND_REQUEUE"}`)

	// The same request again: Existing, the job as it is now, nothing written.
	events := testdb.Count(t, pool, "job_events")
	again := mustRequeued(t)(requeue.Job(ctx, pool, request(t, dead, "provider back")))
	if again.Disposition != runledger.DispositionExisting || again.Before != nil || again.EventID != nil ||
		again.After.ID != dead.ID || again.After.RunNumber != 2 || again.After.Status != runledger.JobStatusPending {
		t.Fatalf("retry = %+v, want existing with the job at run 2", again)
	}
	if n := testdb.Count(t, pool, "job_events"); n != events {
		t.Fatalf("retry wrote %d events", n-events)
	}
	// Another reason, or the other status, for the requeued run: a mismatch.
	for _, req := range []requeue.Request{
		request(t, dead, "another reason"),
		{Scope: org, JobID: dead.ID, ExpectedStatus: requeue.Canceled, ExpectedRunNumber: 1, Reason: "provider back"},
	} {
		out, err := requeue.Job(ctx, pool, req)
		m, ok := out.(requeue.ExpectationMismatch)
		if err != nil || !ok || m.Actual.RunNumber != 2 || m.Actual.Status != runledger.JobStatusPending {
			t.Fatalf("requeue %s %q of the requeued run: %T %+v %v, want a mismatch showing run 2", req.ExpectedStatus, req.Reason, out, out, err)
		}
	}
	if n := requeuedEvents(t, pool, dead.ID); n != 1 {
		t.Fatalf("%d REQUEUED events, want 1", n)
	}

	// A worker runs it at run 2; a retry of the old request still answers
	// Existing, now with the job SUCCEEDED.
	leased := testdb.LeaseJob(t, ctx, pool, dead.ID)
	if leased.RunNumber != 2 || leased.Attempt != 1 {
		t.Fatalf("claimed %+v, want run 2 attempt 1", leased)
	}
	if _, err := lease.Complete(ctx, pool, testdb.CompleteRequest(leased)); err != nil {
		t.Fatal(err)
	}
	late := mustRequeued(t)(requeue.Job(ctx, pool, request(t, dead, "provider back")))
	if late.Disposition != runledger.DispositionExisting || late.After.Status != runledger.JobStatusSucceeded {
		t.Fatalf("late retry = %+v, want existing with the job SUCCEEDED", late)
	}
}

// ResetProgress clears progress and checkpoint and records its policy.
func TestRequeueResetProgress(t *testing.T) {
	t.Parallel()
	ctx := testdb.Context(t)
	pool := testdb.New(t)
	dead := deadLettered(t, ctx, pool, runledger.Global())
	req := request(t, dead, "start over")
	req.StatePolicy = requeue.ResetProgress
	got := mustRequeued(t)(requeue.Job(ctx, pool, req))
	if got.After.ProgressDone != nil || got.After.ProgressTotal != nil || got.After.ProgressPct != nil || got.After.Checkpoint != nil {
		t.Fatalf("after = %+v, want progress and checkpoint cleared", got.After)
	}
	policy := testdb.Scalar[string](t, pool, `SELECT payload->>'state_policy' FROM job_events WHERE id = $1`, *got.EventID)
	if policy != "reset_progress_and_checkpoint" {
		t.Fatalf("state_policy = %q", policy)
	}
}

// The scope must be exact: an organization's job is NotFound to the global
// scope and to another organization; a global job is found only by the
// global scope. A status or run other than observed is a mismatch showing
// the job. Nothing is written by any of them.
func TestRequeueScopeAndMismatches(t *testing.T) {
	t.Parallel()
	ctx := testdb.Context(t)
	pool := testdb.New(t)
	org := runledger.Organization(uuid.New())
	orgJob := deadLettered(t, ctx, pool, org)
	globalJob := deadLettered(t, ctx, pool, runledger.Global())

	for name, req := range map[string]requeue.Request{
		"org job, global scope":    {Scope: runledger.Global(), JobID: orgJob.ID, ExpectedStatus: requeue.DeadLettered, ExpectedRunNumber: 1, Reason: "r"},
		"org job, other org":       {Scope: runledger.Organization(uuid.New()), JobID: orgJob.ID, ExpectedStatus: requeue.DeadLettered, ExpectedRunNumber: 1, Reason: "r"},
		"global job, an org scope": {Scope: org, JobID: globalJob.ID, ExpectedStatus: requeue.DeadLettered, ExpectedRunNumber: 1, Reason: "r"},
		"no such job":              {Scope: org, JobID: uuid.New(), ExpectedStatus: requeue.DeadLettered, ExpectedRunNumber: 1, Reason: "r"},
	} {
		if out, err := requeue.Job(ctx, pool, req); err != nil || out != (requeue.NotFound{}) {
			t.Errorf("%s: %T %v, want NotFound", name, out, err)
		}
	}
	for name, req := range map[string]requeue.Request{
		"status": {Scope: org, JobID: orgJob.ID, ExpectedStatus: requeue.Canceled, ExpectedRunNumber: 1, Reason: "r"},
		"run":    {Scope: org, JobID: orgJob.ID, ExpectedStatus: requeue.DeadLettered, ExpectedRunNumber: 2, Reason: "r"},
	} {
		out, err := requeue.Job(ctx, pool, req)
		m, ok := out.(requeue.ExpectationMismatch)
		if err != nil || !ok || m.Actual.ID != orgJob.ID || m.Actual.Status != runledger.JobStatusDeadLettered || m.Actual.RunNumber != 1 {
			t.Errorf("%s mismatch: %T %+v %v", name, out, out, err)
		}
	}
	if n := requeuedEvents(t, pool, orgJob.ID) + requeuedEvents(t, pool, globalJob.ID); n != 0 {
		t.Fatalf("%d REQUEUED events written", n)
	}
	// The global job, by the global scope.
	if got := mustRequeued(t)(requeue.Job(ctx, pool, request(t, globalJob, "r"))); got.After.OrganizationID != nil {
		t.Fatalf("global job requeued into %v", got.After.OrganizationID)
	}
}

// In the caller's transaction: a rollback leaves the job as it was, no
// event; a commit keeps the requeue. A REPEATABLE READ transaction is
// refused after validation, with no lock taken.
func TestRequeueTxCommitRollbackAndIsolation(t *testing.T) {
	t.Parallel()
	ctx := testdb.Context(t)
	pool := testdb.New(t)
	dead := deadLettered(t, ctx, pool, runledger.Global())

	testdb.InTx(t, ctx, pool, func(tx pgx.Tx) {
		mustRequeued(t)(requeue.JobTx(ctx, tx, request(t, dead, "r")))
	}) // rolled back
	if st := testdb.Scalar[string](t, pool, `SELECT status::text FROM job_queue WHERE id = $1`, dead.ID); st != "DEAD_LETTERED" || requeuedEvents(t, pool, dead.ID) != 0 {
		t.Fatalf("after rollback: %s with %d REQUEUED events", st, requeuedEvents(t, pool, dead.ID))
	}

	rr, err := pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	if err != nil {
		t.Fatal(err)
	}
	bad := request(t, dead, " ")
	_, err = requeue.JobTx(ctx, rr, bad)
	wantCode(t, err, requeue.CodeReasonBlank) // validation first
	_, err = requeue.JobTx(ctx, rr, request(t, dead, "r"))
	wantCode(t, err, requeue.CodeUnsupportedIsolation)
	_ = rr.Rollback(ctx)

	tx := testdb.Begin(t, ctx, pool)
	got := mustRequeued(t)(requeue.JobTx(ctx, tx, request(t, dead, "r")))
	if !testdb.RowLocked(t, pool, "job_queue", "id = $1", dead.ID, "SHARE") || testdb.RowLocked(t, pool, "job_queue", "id = $1", dead.ID, "KEY SHARE") {
		t.Fatal("a requeue in an open transaction does not hold the job FOR NO KEY UPDATE")
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if got.Disposition != runledger.DispositionInserted ||
		testdb.Scalar[int32](t, pool, `SELECT run_number FROM job_queue WHERE id = $1`, dead.ID) != 2 {
		t.Fatalf("after commit: %+v", got)
	}
}

// A keyed enqueue that finds its dead-lettered job (and locks it FOR NO
// KEY UPDATE), then a requeue of that job, in one transaction, while a
// second transaction does the same: the second waits for the first, then
// gets existing for both, with no lock-upgrade deadlock.
func TestKeyedEnqueueThenRequeueDoesNotDeadlock(t *testing.T) {
	t.Parallel()
	ctx := testdb.Context(t)
	pool := testdb.New(t)
	testdb.DefineType(t, pool, "charge.capture")
	enq := jobs.EnqueueRequest{JobType: "charge.capture", IdempotencyKey: "order-7", MaxAttempts: testdb.Ptr(int32(1))}
	j := testdb.Enqueue(t, ctx, pool, enq)
	leased := testdb.LeaseJob(t, ctx, pool, j.ID)
	dead, err := lease.Fail(ctx, pool, testdb.FailRequest(leased))
	if err != nil {
		t.Fatal(err)
	}

	step := func(tx pgx.Tx) (requeue.Outcome, error) {
		res, err := jobs.EnqueueTx(ctx, tx, enq)
		if err != nil {
			return nil, err
		}
		if res.Disposition != runledger.DispositionExisting || res.Job.ID != dead.ID {
			t.Errorf("keyed enqueue = %+v, want the existing job", res)
		}
		return requeue.JobTx(ctx, tx, request(t, dead, "retry order 7"))
	}
	first := testdb.Begin(t, ctx, pool)
	got := mustRequeued(t)(step(first))
	if got.Disposition != runledger.DispositionInserted {
		t.Fatalf("first = %+v", got)
	}
	done := make(chan requeue.Requeued, 1)
	errc := make(chan error, 1)
	go func() {
		second, err := pool.Begin(ctx)
		if err != nil {
			errc <- err
			return
		}
		defer second.Rollback(ctx) //nolint:errcheck
		out, err := step(second)
		if err != nil {
			errc <- err
			return
		}
		if err := second.Commit(ctx); err != nil {
			errc <- err
			return
		}
		r, _ := out.(requeue.Requeued)
		done <- r
	}()
	testdb.WaitBlocked(t, pool, 0)
	if err := first.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errc:
		t.Fatalf("second transaction: %v", err)
	case r := <-done:
		if r.Disposition != runledger.DispositionExisting || r.After.RunNumber != 2 {
			t.Fatalf("second = %+v, want existing at run 2", r)
		}
	}
}

// A mismatch against a leased job takes no lock: the worker's heartbeat
// goes through while the caller's transaction is still open.
func TestLiveMismatchDoesNotBlockAHeartbeat(t *testing.T) {
	t.Parallel()
	ctx := testdb.Context(t)
	pool := testdb.New(t)
	testdb.DefineType(t, pool, "charge.capture")
	j := testdb.Leased(t, ctx, pool, jobs.EnqueueRequest{JobType: "charge.capture"})
	tx := testdb.Begin(t, ctx, pool)
	out, err := requeue.JobTx(ctx, tx, requeue.Request{JobID: j.ID, ExpectedStatus: requeue.DeadLettered, ExpectedRunNumber: 1, Reason: "r"})
	if m, ok := out.(requeue.ExpectationMismatch); err != nil || !ok || m.Actual.Status != runledger.JobStatusLeased {
		t.Fatalf("requeue of a leased job: %T %v", out, err)
	}
	if testdb.RowLocked(t, pool, "job_queue", "id = $1", j.ID, "UPDATE") {
		t.Fatal("the mismatch left the job locked")
	}
	s := j.Scope()
	if _, err := lease.Heartbeat(ctx, pool, lease.HeartbeatRequest{Scope: &s, JobID: j.ID, RunNumber: 1, Attempt: 1, WorkerID: *j.WorkerID, Lease: time.Minute}); err != nil {
		t.Fatalf("heartbeat beside the open transaction: %v", err)
	}
}

// A job canceled during a live lease is not quiesced until the lease
// would have run out: the outcome says when to retry, leaves the row
// unlocked and writes nothing; once the lease has run out the requeue
// goes through.
func TestCanceledJobWaitsForItsLease(t *testing.T) {
	t.Parallel()
	ctx := testdb.Context(t)
	pool := testdb.New(t)
	c := canceledLive(t, ctx, pool, runledger.Global())

	tx := testdb.Begin(t, ctx, pool)
	out, err := requeue.JobTx(ctx, tx, request(t, c, "try again"))
	nq, ok := out.(requeue.NotQuiesced)
	if err != nil || !ok || !nq.RetryAfter.Equal(*c.LeaseExpiresAt) || nq.Actual.Status != runledger.JobStatusCanceled {
		t.Fatalf("requeue of a canceled, live lease: %T %+v %v; want NotQuiesced retry after %s", out, out, err, c.LeaseExpiresAt)
	}
	if testdb.RowLocked(t, pool, "job_queue", "id = $1", c.ID, "UPDATE") {
		t.Fatal("not quiesced left the job locked")
	}
	_ = tx.Rollback(ctx)

	testdb.Exec(t, pool, `UPDATE job_queue SET lease_expires_at = now() - interval '1 second' WHERE id = $1`, c.ID)
	got := mustRequeued(t)(requeue.Job(ctx, pool, request(t, c, "try again")))
	if got.After.RunNumber != 2 || got.After.LeaseExpiresAt != nil {
		t.Fatalf("after = %+v", got.After)
	}
}

// A job a workflow step owns is refused with the workflow code and
// message, and nothing is written.
func TestWorkflowManagedJobIsRefused(t *testing.T) {
	t.Parallel()
	ctx := testdb.Context(t)
	pool := testdb.New(t)
	dead := deadLettered(t, ctx, pool, runledger.Global())
	testdb.OwnByWorkflowStep(t, pool, dead.ID)
	_, err := requeue.Job(ctx, pool, request(t, dead, "r"))
	e := testdb.WantCode(t, err, runledger.CodeWorkflowManaged)
	if e.Message != "Workflow-managed jobs cannot be requeued directly." || requeuedEvents(t, pool, dead.ID) != 0 {
		t.Fatalf("message %q", e.Message)
	}
}

// Two identical requests racing for one job (both wait behind a lock held
// elsewhere) requeue it once: one Inserted, one Existing, one event.
func TestConcurrentIdenticalRequestsRequeueOnce(t *testing.T) {
	t.Parallel()
	ctx := testdb.Context(t)
	pool := testdb.New(t)
	dead := deadLettered(t, ctx, pool, runledger.Global())
	holder := testdb.Begin(t, ctx, pool)
	testdb.LockJob(t, holder, dead.ID, "NO KEY UPDATE")

	type res struct {
		out requeue.Outcome
		err error
	}
	results := make(chan res, 2)
	for range 2 {
		go func() {
			out, err := requeue.Job(ctx, pool, request(t, dead, "once"))
			results <- res{out, err}
		}()
	}
	testdb.WaitFor(t, "both requeues to wait for the job", func() bool { return len(testdb.LockWaiters(t, pool)) >= 2 })
	if err := holder.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	seen := map[runledger.Disposition]int{}
	for range 2 {
		r := <-results
		got := mustRequeued(t)(r.out, r.err)
		seen[got.Disposition]++
	}
	if seen[runledger.DispositionInserted] != 1 || seen[runledger.DispositionExisting] != 1 || requeuedEvents(t, pool, dead.ID) != 1 {
		t.Fatalf("dispositions %v, %d events; want one of each and one event", seen, requeuedEvents(t, pool, dead.ID))
	}
}

// Every bad input is refused before any connection: a closed pool never
// sees it. A valid request on the closed pool fails on the database side,
// naming the operation.
func TestBadInputRefusedBeforeTheDatabase(t *testing.T) {
	t.Parallel()
	ctx := testdb.Context(t)
	pool := testdb.ClosedPool(t)
	id := uuid.New()
	ok := requeue.Request{JobID: id, ExpectedStatus: requeue.DeadLettered, ExpectedRunNumber: 1, Reason: "r"}
	cases := map[runledger.Code]func(r *requeue.Request){
		requeue.CodeReasonBlank:           func(r *requeue.Request) { r.Reason = " \t\u00a0" },
		requeue.CodeReasonInvalid:         func(r *requeue.Request) { r.Reason = "a\x00b" },
		requeue.CodeReasonTooLong:         func(r *requeue.Request) { r.Reason = strings.Repeat("x", requeue.MaxReasonBytes+1) },
		requeue.CodeStatusInvalid:         func(r *requeue.Request) { r.ExpectedStatus = requeue.Status(runledger.JobStatusSucceeded) },
		requeue.CodeStatePolicyInvalid:    func(r *requeue.Request) { r.StatePolicy = 7 },
		runledger.CodeOrganizationInvalid: func(r *requeue.Request) { r.Scope = runledger.Organization(uuid.Nil) },
	}
	for code, mutate := range cases {
		req := ok
		mutate(&req)
		_, err := requeue.Job(ctx, pool, req)
		wantCode(t, err, code)
		if runledger.CategoryOf(err) != runledger.CategoryValidation {
			t.Errorf("%s: category %s", code, runledger.CategoryOf(err))
		}
	}
	for _, s := range []string{"PENDING", "LEASED", "SUCCEEDED", "dead_lettered", ""} {
		if _, err := requeue.ParseStatus(s); !strings.Contains(runledger.CodeOf(err).Error(), "requeue_status_invalid") {
			t.Errorf("ParseStatus(%q) = %v", s, err)
		}
	}
	if _, err := requeue.FromJob(runledger.Job{ID: id, Status: runledger.JobStatusSucceeded, RunNumber: 1}, requeue.PreserveProgress, "r"); !strings.Contains(err.Error(), "replay") {
		t.Errorf("FromJob(SUCCEEDED) = %v, want a pointer to replay", err)
	}
	req := ok
	req.Reason = strings.Repeat("x", requeue.MaxReasonBytes)
	_, err := requeue.Job(ctx, pool, req)
	if runledger.CategoryOf(err) == runledger.CategoryValidation || !strings.Contains(testdb.Detail(err), "compare-and-requeue") {
		t.Fatalf("valid request on a closed pool: %v (detail %q)", err, testdb.Detail(err))
	}
}

// On a session whose default isolation is REPEATABLE READ, Job still runs
// READ COMMITTED and requeues; JobTx in a transaction of that session
// refuses it, after validating the request.
func TestOwnedRequeueOverridesTheSessionIsolation(t *testing.T) {
	t.Parallel()
	ctx := testdb.Context(t)
	url := testdb.NewURL(t)
	setup := testdb.OpenPool(t, url, 2, nil)
	pool := testdb.OpenPool(t, url, 1, map[string]string{"default_transaction_isolation": "repeatable read"})
	dead := deadLettered(t, ctx, setup, runledger.Global())
	other := deadLettered(t, ctx, setup, runledger.Global())
	mustRequeued(t)(requeue.Job(ctx, pool, request(t, dead, "r")))
	tx := testdb.Begin(t, ctx, pool)
	_, err := requeue.JobTx(ctx, tx, request(t, other, ""))
	wantCode(t, err, requeue.CodeReasonBlank)
	_, err = requeue.JobTx(ctx, tx, request(t, other, "r"))
	wantCode(t, err, requeue.CodeUnsupportedIsolation)
}
