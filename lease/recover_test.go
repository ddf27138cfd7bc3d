package lease_test

import (
	"slices"
	"testing"

	"github.com/google/uuid"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/internal/testdb"
	"github.com/runledger-go/runledger/jobs"
	"github.com/runledger-go/runledger/lease"
)

func TestRecoverExpiredLeaseReturnsJobToPending(t *testing.T) {
	t.Parallel()
	ctx, pool := setup(t)
	first := testdb.Enqueue(t, ctx, pool, jobs.EnqueueRequest{MaxAttempts: testdb.Ptr[int32](3), ExecutionResourceKey: "r"})
	second := testdb.Enqueue(t, ctx, pool, jobs.EnqueueRequest{MaxAttempts: testdb.Ptr[int32](3), ExecutionResourceKey: "r"})
	live := testdb.Enqueue(t, ctx, pool, jobs.EnqueueRequest{Priority: testdb.Ptr[int32](1)})
	got := testdb.Claim(t, ctx, pool, lease.ClaimRequest{})
	if !slices.Equal(testdb.IDs(got), []uuid.UUID{first.ID, live.ID}) {
		t.Fatalf("claimed %v, want %s (holding key r) and %s", testdb.IDs(got), first.ID, live.ID)
	}
	l := got[0]
	testdb.Exec(t, pool, `UPDATE job_queue SET lease_expires_at = now() - interval '1 second' WHERE id = $1`, first.ID)

	rec, err := lease.RecoverExpiredLeases(ctx, pool, 10)
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
	case r.NextRunAt.Sub(*l.StartedAt) < lease.Backoff(1):
		// The retry delay of attempt 1, from the recovery's clock, which is
		// after the lease's start.
		t.Fatalf("due at %s, want at least %s after the attempt started (%s)", r.NextRunAt, lease.Backoff(1), *l.StartedAt)
	case r.WorkerID != nil, r.LeaseExpiresAt != nil:
		t.Fatalf("worker %v lease %v, want cleared", r.WorkerID, r.LeaseExpiresAt)
	case r.LastErrorCode == nil || *r.LastErrorCode != "job.lease_expired":
		t.Fatalf("last error code = %v", r.LastErrorCode)
	}
	typ, attempt, payload, _ := lastEvent(t, ctx, pool, first.ID)
	if typ != "RETRY_SCHEDULED" || attempt == nil || *attempt != 1 || payload["failure_kind"] != "LEASE_EXPIRED" {
		t.Fatalf("event = %s attempt %v payload %v", typ, attempt, payload)
	}
	// The same payload on one server and on Citus (where the events are a
	// statement of their own): no message, the retry's due time.
	if len(payload) != 3 || payload["error_code"] != "job.lease_expired" || payload["next_run_at"] == nil {
		t.Fatalf("event payload %v, want failure_kind, error_code and next_run_at only", payload)
	}
	if n := testdb.Scalar[int](t, pool, `SELECT count(*) FROM job_execution_resource_claims`); n != 0 {
		t.Fatalf("%d resource claims left after recovery, want the key released", n)
	}
	// The worker that lost the lease can no longer complete it.
	_, err = lease.Complete(ctx, pool, testdb.CompleteRequest(l))
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
	testdb.Exec(t, holder, `SELECT pg_advisory_xact_lock($1)`, lease.RecoveryLockKey)
	rec, err := lease.RecoverExpiredLeases(ctx, pool, 10)
	if err != nil || len(rec) != 0 {
		t.Fatalf("recovered %d jobs (%v) while another recovery holds the lock, want none", len(rec), err)
	}
	_ = holder.Rollback(ctx)
	if rec, err = lease.RecoverExpiredLeases(ctx, pool, 10); err != nil || len(rec) != 1 {
		t.Fatalf("recovered %d jobs (%v) once the lock was free, want 1", len(rec), err)
	}
}

func TestRecoverExpiredLeaseDeadLettersWhenAttemptsSpent(t *testing.T) {
	t.Parallel()
	ctx, pool := setup(t)
	j := testdb.Enqueue(t, ctx, pool, jobs.EnqueueRequest{MaxAttempts: testdb.Ptr[int32](1)})
	claimOnly(t, ctx, pool, j.ID)
	testdb.Exec(t, pool, `UPDATE job_queue SET lease_expires_at = now() - interval '1 second' WHERE id = $1`, j.ID)
	rec, err := lease.RecoverExpiredLeases(ctx, pool, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(rec) != 1 || rec[0].Status != runledger.JobStatusDeadLettered || rec[0].FinishedAt == nil {
		t.Fatalf("recovered = %+v, want one DEAD_LETTERED job", rec)
	}
	typ, _, payload, _ := lastEvent(t, ctx, pool, j.ID)
	if typ != "DEAD_LETTERED" || payload["failure_kind"] != "LEASE_EXPIRED" || len(payload) != 2 || payload["error_code"] != "job.lease_expired" {
		t.Fatalf("event = %s %v, want failure_kind and error_code only", typ, payload)
	}
	if rec2, err := lease.RecoverExpiredLeases(ctx, pool, 10); err != nil || len(rec2) != 0 {
		t.Fatalf("second recovery = %v, %v; want nothing", testdb.IDs(rec2), err)
	}
}

func TestRecoverExpiredLeasesRespectsLimitOldestFirst(t *testing.T) {
	t.Parallel()
	ctx, pool := setup(t)
	a := testdb.Enqueue(t, ctx, pool, jobs.EnqueueRequest{})
	b := testdb.Enqueue(t, ctx, pool, jobs.EnqueueRequest{})
	testdb.Claim(t, ctx, pool, lease.ClaimRequest{Limit: 2})
	testdb.Exec(t, pool, `UPDATE job_queue SET lease_expires_at = now() - interval '1 minute' WHERE id = $1`, b.ID)
	testdb.Exec(t, pool, `UPDATE job_queue SET lease_expires_at = now() - interval '1 second' WHERE id = $1`, a.ID)
	rec, err := lease.RecoverExpiredLeases(ctx, pool, 1)
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
	rec, err = lease.RecoverExpiredLeasesTx(ctx, tx, 5)
	if err != nil {
		t.Fatal(err)
	}
	if len(rec) != 1 || rec[0].ID != a.ID {
		t.Fatalf("recovered %v in the caller's transaction, want %s", testdb.IDs(rec), a.ID)
	}
}
