package jobs_test

import (
	"slices"
	"testing"

	"github.com/google/uuid"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/internal/testdb"
	"github.com/runledger-go/runledger/jobs"
)

func TestCancelPendingJob(t *testing.T) {
	t.Parallel()
	ctx, pool := setup(t)
	j := testdb.Enqueue(t, ctx, pool, jobs.EnqueueRequest{})
	c, err := jobs.Cancel(ctx, pool, jobs.CancelRequest{Scope: runledger.Global(), JobID: j.ID, Reason: "not needed"})
	if err != nil {
		t.Fatal(err)
	}
	if c.Status != runledger.JobStatusCanceled || c.FinishedAt == nil || c.StatusReason == nil || *c.StatusReason != "not needed" {
		t.Fatalf("canceled job = %s finished %v reason %v", c.Status, c.FinishedAt, c.StatusReason)
	}
	typ, attempt, payload, _ := lastEvent(t, ctx, pool, j.ID)
	if typ != "CANCELED" || attempt != nil || payload["reason"] != "not needed" {
		t.Fatalf("event = %s attempt %v payload %v, want CANCELED without attempt, with the reason", typ, attempt, payload)
	}
	if got := testdb.Claim(t, ctx, pool, jobs.ClaimRequest{}); len(got) != 0 {
		t.Fatalf("claimed a canceled job")
	}
	// A blank reason stores NULL.
	j2 := testdb.Enqueue(t, ctx, pool, jobs.EnqueueRequest{})
	c2, err := jobs.Cancel(ctx, pool, jobs.CancelRequest{JobID: j2.ID, Reason: "  "})
	if err != nil {
		t.Fatal(err)
	}
	if c2.StatusReason != nil {
		t.Fatalf("blank reason stored as %q", *c2.StatusReason)
	}
}

func TestCancelLeasedJobEndsTheWorkersLease(t *testing.T) {
	t.Parallel()
	ctx, pool := setup(t)
	l := testdb.Leased(t, ctx, pool, jobs.EnqueueRequest{})
	c, err := jobs.Cancel(ctx, pool, jobs.CancelRequest{JobID: l.ID, Reason: "operator"})
	if err != nil {
		t.Fatal(err)
	}
	if c.Status != runledger.JobStatusCanceled {
		t.Fatalf("status = %s", c.Status)
	}
	_, attempt, _, _ := lastEvent(t, ctx, pool, l.ID)
	if attempt == nil || *attempt != 1 {
		t.Fatalf("CANCELED event attempt = %v, want the leased attempt 1", attempt)
	}
	_, err = jobs.Complete(ctx, pool, testdb.CompleteRequest(l))
	testdb.WantCode(t, err, runledger.CodeLeaseMismatch)
}

func TestCancelFinishedJobIsNotCancelable(t *testing.T) {
	t.Parallel()
	ctx, pool := setup(t)
	l := testdb.Leased(t, ctx, pool, jobs.EnqueueRequest{})
	if _, err := jobs.Complete(ctx, pool, testdb.CompleteRequest(l)); err != nil {
		t.Fatal(err)
	}
	canceled := testdb.Enqueue(t, ctx, pool, jobs.EnqueueRequest{})
	if _, err := jobs.Cancel(ctx, pool, jobs.CancelRequest{JobID: canceled.ID}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []uuid.UUID{l.ID, canceled.ID} {
		before := testdb.Scalar[int](t, pool, `SELECT count(*) FROM job_events`)
		_, err := jobs.Cancel(ctx, pool, jobs.CancelRequest{JobID: id, Reason: "again"})
		testdb.WantCode(t, err, runledger.CodeNotCancelable)
		if after := testdb.Scalar[int](t, pool, `SELECT count(*) FROM job_events`); after != before {
			t.Fatalf("refused cancel wrote %d events", after-before)
		}
	}
	j, err := jobs.Get(ctx, pool, runledger.Global(), l.ID)
	if err != nil {
		t.Fatal(err)
	}
	if j.Status != runledger.JobStatusSucceeded || j.StatusReason != nil {
		t.Fatalf("succeeded job changed by a refused cancel: %s %v", j.Status, j.StatusReason)
	}
}

func TestCancelOutsideScopeIsNotFound(t *testing.T) {
	t.Parallel()
	ctx, pool := setup(t)
	org := uuid.New()
	orgJob := testdb.Enqueue(t, ctx, pool, jobs.EnqueueRequest{Scope: runledger.Organization(org)})
	globalJob := testdb.Enqueue(t, ctx, pool, jobs.EnqueueRequest{})
	cases := []jobs.CancelRequest{
		{Scope: runledger.Global(), JobID: orgJob.ID},
		{Scope: runledger.Organization(uuid.New()), JobID: orgJob.ID},
		{Scope: runledger.Organization(org), JobID: globalJob.ID},
		{Scope: runledger.Global(), JobID: uuid.New()},
	}
	for _, req := range cases {
		_, err := jobs.Cancel(ctx, pool, req)
		testdb.WantCode(t, err, runledger.CodeJobNotFound)
	}
	if n := testdb.Scalar[int](t, pool, `SELECT count(*) FROM job_queue WHERE status <> 'PENDING'`); n != 0 {
		t.Fatalf("%d jobs changed by out-of-scope cancels", n)
	}
	if _, err := jobs.Cancel(ctx, pool, jobs.CancelRequest{Scope: runledger.Organization(org), JobID: orgJob.ID}); err != nil {
		t.Fatalf("cancel in scope: %v", err)
	}
}

func TestCancelLeasedJobKeepsResourceUntilLeaseWouldEnd(t *testing.T) {
	t.Parallel()
	ctx, pool := setup(t)
	first := testdb.Enqueue(t, ctx, pool, jobs.EnqueueRequest{ExecutionResourceKey: "db-main"})
	second := testdb.Enqueue(t, ctx, pool, jobs.EnqueueRequest{ExecutionResourceKey: "db-main"})
	claimOnly(t, ctx, pool, first.ID)
	if _, err := jobs.Cancel(ctx, pool, jobs.CancelRequest{JobID: first.ID}); err != nil {
		t.Fatal(err)
	}
	if n := testdb.Scalar[int](t, pool, `SELECT count(*) FROM job_execution_resource_claims WHERE job_id = $1 AND release_after IS NOT NULL`, first.ID); n != 1 {
		t.Fatal("the canceled job's claim was not kept with a delayed release")
	}
	if got := testdb.Claim(t, ctx, pool, jobs.ClaimRequest{}); len(got) != 0 {
		t.Fatalf("claimed %v while the canceled lease could still be running", testdb.IDs(got))
	}
	// Once the release is due, recovery purges it and the key is free.
	testdb.Exec(t, pool, `UPDATE job_execution_resource_claims SET release_after = now() - interval '1 second'`)
	if _, err := jobs.RecoverExpiredLeases(ctx, pool, 10); err != nil {
		t.Fatal(err)
	}
	if n := testdb.Scalar[int](t, pool, `SELECT count(*) FROM job_execution_resource_claims`); n != 0 {
		t.Fatalf("%d claims left after the purge", n)
	}
	claimOnly(t, ctx, pool, second.ID)
}

func TestRecoverExpiredLeaseReturnsJobToPending(t *testing.T) {
	t.Parallel()
	ctx, pool := setup(t)
	first := testdb.Enqueue(t, ctx, pool, jobs.EnqueueRequest{MaxAttempts: testdb.Ptr[int32](3), ExecutionResourceKey: "r"})
	second := testdb.Enqueue(t, ctx, pool, jobs.EnqueueRequest{MaxAttempts: testdb.Ptr[int32](3), ExecutionResourceKey: "r"})
	live := testdb.Enqueue(t, ctx, pool, jobs.EnqueueRequest{Priority: testdb.Ptr[int32](1)})
	got := testdb.Claim(t, ctx, pool, jobs.ClaimRequest{})
	if !slices.Equal(testdb.IDs(got), []uuid.UUID{first.ID, live.ID}) {
		t.Fatalf("claimed %v, want %s (holding key r) and %s", testdb.IDs(got), first.ID, live.ID)
	}
	l := got[0]
	testdb.Exec(t, pool, `UPDATE job_queue SET lease_expires_at = now() - interval '1 second' WHERE id = $1`, first.ID)

	rec, err := jobs.RecoverExpiredLeases(ctx, pool, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(rec) != 1 || rec[0].ID != first.ID {
		t.Fatalf("recovered %v, want only the expired %s (not the live lease)", testdb.IDs(rec), first.ID)
	}
	r := rec[0]
	switch {
	case r.Status != runledger.JobStatusPending, r.Stage != runledger.JobStageScheduled:
		t.Fatalf("recovered job = %s %s, want PENDING scheduled", r.Status, r.Stage)
	case r.NextRunAt.Sub(*l.StartedAt) < jobs.Backoff(1):
		// The retry delay of attempt 1, from the recovery's clock, which is
		// after the lease's start.
		t.Fatalf("due at %s, want at least %s after the attempt started (%s)", r.NextRunAt, jobs.Backoff(1), *l.StartedAt)
	case r.WorkerID != nil, r.LeaseExpiresAt != nil:
		t.Fatalf("worker %v lease %v, want cleared", r.WorkerID, r.LeaseExpiresAt)
	case r.LastErrorCode == nil || *r.LastErrorCode != "job.lease_expired":
		t.Fatalf("last error code = %v", r.LastErrorCode)
	}
	typ, attempt, payload, _ := lastEvent(t, ctx, pool, first.ID)
	if typ != "RETRY_SCHEDULED" || attempt == nil || *attempt != 1 || payload["failure_kind"] != "LEASE_EXPIRED" {
		t.Fatalf("event = %s attempt %v payload %v", typ, attempt, payload)
	}
	if n := testdb.Scalar[int](t, pool, `SELECT count(*) FROM job_execution_resource_claims`); n != 0 {
		t.Fatalf("%d resource claims left after recovery, want the key released", n)
	}
	// The worker that lost the lease can no longer complete it.
	_, err = jobs.Complete(ctx, pool, testdb.CompleteRequest(l))
	testdb.WantCode(t, err, runledger.CodeLeaseMismatch)
	// The key is free: the second job on it, due since it was enqueued
	// (the recovered one is due only after its retry delay), takes it.
	claimOnly(t, ctx, pool, second.ID)
}

// Recovery runs one at a time: while another transaction holds the
// recovery lock, a recovery recovers nothing, without waiting for it.
func TestRecoverExpiredLeasesOneAtATime(t *testing.T) {
	t.Parallel()
	ctx, pool := setup(t)
	j := testdb.Enqueue(t, ctx, pool, jobs.EnqueueRequest{})
	claimOnly(t, ctx, pool, j.ID)
	testdb.Exec(t, pool, `UPDATE job_queue SET lease_expires_at = now() - interval '1 second' WHERE id = $1`, j.ID)
	holder := testdb.Begin(t, ctx, pool)
	testdb.Exec(t, holder, `SELECT pg_advisory_xact_lock($1)`, jobs.RecoveryLockKey)
	rec, err := jobs.RecoverExpiredLeases(ctx, pool, 10)
	if err != nil || len(rec) != 0 {
		t.Fatalf("recovered %d jobs (%v) while another recovery holds the lock, want none", len(rec), err)
	}
	_ = holder.Rollback(ctx)
	if rec, err = jobs.RecoverExpiredLeases(ctx, pool, 10); err != nil || len(rec) != 1 {
		t.Fatalf("recovered %d jobs (%v) once the lock was free, want 1", len(rec), err)
	}
}

func TestRecoverExpiredLeaseDeadLettersWhenAttemptsSpent(t *testing.T) {
	t.Parallel()
	ctx, pool := setup(t)
	j := testdb.Enqueue(t, ctx, pool, jobs.EnqueueRequest{MaxAttempts: testdb.Ptr[int32](1)})
	claimOnly(t, ctx, pool, j.ID)
	testdb.Exec(t, pool, `UPDATE job_queue SET lease_expires_at = now() - interval '1 second' WHERE id = $1`, j.ID)
	rec, err := jobs.RecoverExpiredLeases(ctx, pool, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(rec) != 1 || rec[0].Status != runledger.JobStatusDeadLettered || rec[0].FinishedAt == nil {
		t.Fatalf("recovered = %+v, want one DEAD_LETTERED job", rec)
	}
	typ, _, payload, _ := lastEvent(t, ctx, pool, j.ID)
	if typ != "DEAD_LETTERED" || payload["failure_kind"] != "LEASE_EXPIRED" {
		t.Fatalf("event = %s %v", typ, payload)
	}
	if rec2, err := jobs.RecoverExpiredLeases(ctx, pool, 10); err != nil || len(rec2) != 0 {
		t.Fatalf("second recovery = %v, %v; want nothing", testdb.IDs(rec2), err)
	}
}

func TestRecoverExpiredLeasesRespectsLimitOldestFirst(t *testing.T) {
	t.Parallel()
	ctx, pool := setup(t)
	a := testdb.Enqueue(t, ctx, pool, jobs.EnqueueRequest{})
	b := testdb.Enqueue(t, ctx, pool, jobs.EnqueueRequest{})
	testdb.Claim(t, ctx, pool, jobs.ClaimRequest{Limit: 2})
	testdb.Exec(t, pool, `UPDATE job_queue SET lease_expires_at = now() - interval '1 minute' WHERE id = $1`, b.ID)
	testdb.Exec(t, pool, `UPDATE job_queue SET lease_expires_at = now() - interval '1 second' WHERE id = $1`, a.ID)
	rec, err := jobs.RecoverExpiredLeases(ctx, pool, 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(rec) != 1 || rec[0].ID != b.ID {
		t.Fatalf("recovered %v with limit 1, want the oldest expiry %s", testdb.IDs(rec), b.ID)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	rec, err = jobs.RecoverExpiredLeasesTx(ctx, tx, 5)
	if err != nil {
		t.Fatal(err)
	}
	if len(rec) != 1 || rec[0].ID != a.ID {
		t.Fatalf("recovered %v in the caller's transaction, want %s", testdb.IDs(rec), a.ID)
	}
}
