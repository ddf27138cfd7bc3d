package jobs_test

import (
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/internal/testdb"
	"github.com/runledger-go/runledger/jobs"
	"github.com/runledger-go/runledger/lease"
)

// Each transition moves updated_at (set by its statement; no trigger does):
// the claim, a heartbeat, a release, a completion and a cancel each set it
// to the transaction's time from a value a day old.
func TestTransitionsSetUpdatedAt(t *testing.T) {
	t.Parallel()
	ctx, pool := setup(t)
	stale := func(id uuid.UUID) {
		t.Helper()
		testdb.Exec(t, pool, `UPDATE job_queue SET updated_at = now() - interval '1 day' WHERE id = $1`, id)
	}
	moved := func(step string, id uuid.UUID) {
		t.Helper()
		if !testdb.Scalar[bool](t, pool, `SELECT updated_at > now() - interval '1 hour' FROM job_queue WHERE id = $1`, id) {
			t.Fatalf("%s left updated_at a day old", step)
		}
	}
	j := testdb.Enqueue(t, ctx, pool, jobs.EnqueueRequest{})
	stale(j.ID)
	l := testdb.LeaseJob(t, ctx, pool, j.ID)
	moved("the claim", j.ID)

	stale(j.ID)
	if _, err := lease.Heartbeat(ctx, pool, lease.HeartbeatRequest{JobID: l.ID, RunNumber: l.RunNumber, Attempt: l.Attempt,
		WorkerID: *l.WorkerID, Lease: time.Minute}); err != nil {
		t.Fatal(err)
	}
	moved("a heartbeat", j.ID)

	stale(j.ID)
	if _, err := lease.Complete(ctx, pool, testdb.CompleteRequest(l)); err != nil {
		t.Fatal(err)
	}
	moved("the completion", j.ID)

	c := testdb.Enqueue(t, ctx, pool, jobs.EnqueueRequest{})
	stale(c.ID)
	if _, err := jobs.Cancel(ctx, pool, jobs.CancelRequest{Scope: runledger.Global(), JobID: c.ID, Reason: "r"}); err != nil {
		t.Fatal(err)
	}
	moved("the cancel", c.ID)
}
