package requeue_test

import (
	"testing"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/internal/testdb"
	"github.com/runledger-go/runledger/jobs"
	"github.com/runledger-go/runledger/requeue"
)

// A job with an execution resource, canceled while its worker held it:
// not quiesced while the canceled lease lasts; once it has run out (the
// lease and the claim's delayed release, moved into the past here, as
// time would), the job is requeued and claimed like any pending job,
// taking over its old claim.
func TestRequeuedJobKeepsItsResourceRules(t *testing.T) {
	t.Parallel()
	ctx := testdb.Context(t)
	pool := testdb.New(t)
	testdb.DefineType(t, pool, "charge.capture")
	j := testdb.Leased(t, ctx, pool, jobs.EnqueueRequest{JobType: "charge.capture", ExecutionResourceKey: "card-42"})
	c, err := jobs.Cancel(ctx, pool, jobs.CancelRequest{Scope: j.Scope(), JobID: j.ID, Reason: "operator"})
	if err != nil {
		t.Fatal(err)
	}
	if out, err := requeue.Job(ctx, pool, request(t, c, "again")); err != nil {
		t.Fatal(err)
	} else if _, ok := out.(requeue.NotQuiesced); !ok {
		t.Fatalf("outcome %T, want NotQuiesced while the canceled lease lasts", out)
	}
	testdb.Exec(t, pool, `UPDATE job_queue SET lease_expires_at = now() - interval '1 second' WHERE id = $1`, j.ID)
	testdb.Exec(t, pool, `UPDATE job_execution_resource_claims SET release_after = now() - interval '1 second' WHERE job_id = $1`, j.ID)
	got := mustRequeued(t)(requeue.Job(ctx, pool, request(t, c, "again")))
	if got.After.ExecutionResourceKey == nil || *got.After.ExecutionResourceKey != "card-42" {
		t.Fatalf("after = %+v, want the resource key kept", got.After)
	}
	leased := testdb.LeaseJob(t, ctx, pool, j.ID)
	if leased.Status != runledger.JobStatusLeased || leased.RunNumber != 2 {
		t.Fatalf("claimed %+v, want LEASED at run 2", leased)
	}
	if n := testdb.Scalar[int64](t, pool, `SELECT count(*) FROM job_execution_resource_claims WHERE job_id = $1 AND run_number = 2 AND release_after IS NULL`, j.ID); n != 1 {
		t.Fatalf("%d live claims of run 2, want 1", n)
	}
}
