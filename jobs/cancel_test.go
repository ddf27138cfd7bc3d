package jobs_test

import (
	"testing"

	"github.com/google/uuid"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/inspect"
	"github.com/runledger-go/runledger/internal/testdb"
	"github.com/runledger-go/runledger/jobs"
	"github.com/runledger-go/runledger/lease"
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
	if got := testdb.Claim(t, ctx, pool, lease.ClaimRequest{}); len(got) != 0 {
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
	_, err = lease.Complete(ctx, pool, testdb.CompleteRequest(l))
	testdb.WantCode(t, err, runledger.CodeLeaseMismatch)
}

func TestCancelFinishedJobIsNotCancelable(t *testing.T) {
	t.Parallel()
	ctx, pool := setup(t)
	l := testdb.Leased(t, ctx, pool, jobs.EnqueueRequest{})
	if _, err := lease.Complete(ctx, pool, testdb.CompleteRequest(l)); err != nil {
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
	j, err := inspect.Get(ctx, pool, runledger.Global(), l.ID)
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
	if got := testdb.Claim(t, ctx, pool, lease.ClaimRequest{}); len(got) != 0 {
		t.Fatalf("claimed %v while the canceled lease could still be running", testdb.IDs(got))
	}
	// Once the release is due, recovery purges it and the key is free.
	testdb.Exec(t, pool, `UPDATE job_execution_resource_claims SET release_after = now() - interval '1 second'`)
	if _, err := lease.RecoverExpiredLeases(ctx, pool, 10); err != nil {
		t.Fatal(err)
	}
	if n := testdb.Scalar[int](t, pool, `SELECT count(*) FROM job_execution_resource_claims`); n != 0 {
		t.Fatalf("%d claims left after the purge", n)
	}
	claimOnly(t, ctx, pool, second.ID)
}
