package requeue_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/internal/testdb"
	"github.com/runledger-go/runledger/jobs"
	"github.com/runledger-go/runledger/lease"
	"github.com/runledger-go/runledger/requeue"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// deadLettered runs a "charge.capture" job of scope to DEAD_LETTERED the
// way a worker does: enqueued with one attempt (and resource key res when
// not ""), leased, its progress and checkpoint recorded by a heartbeat,
// then failed. It returns the job as the failure left it (run 1).
func deadLettered(t testing.TB, ctx context.Context, pool *pgxpool.Pool, scope runledger.Scope) runledger.Job {
	t.Helper()
	testdb.DefineType(t, pool, "charge.capture")
	j := testdb.Leased(t, ctx, pool, jobs.EnqueueRequest{Scope: scope, JobType: "charge.capture",
		Payload: json.RawMessage(`{"charge":"ch_1"}`), MaxAttempts: testdb.Ptr(int32(1))})
	s := j.Scope()
	if _, err := lease.Heartbeat(ctx, pool, lease.HeartbeatRequest{Scope: &s, JobID: j.ID, RunNumber: j.RunNumber, Attempt: j.Attempt,
		WorkerID: *j.WorkerID, Lease: 30 * time.Second, ProgressDone: testdb.Ptr(int64(3)), ProgressTotal: testdb.Ptr(int64(8)),
		Checkpoint: json.RawMessage(`{"cursor":3}`)}); err != nil {
		t.Fatalf("Heartbeat: %v", err)
	}
	failed, err := lease.Fail(ctx, pool, testdb.FailRequest(j))
	if err != nil {
		t.Fatalf("Fail: %v", err)
	}
	if failed.Status != runledger.JobStatusDeadLettered {
		t.Fatalf("failed job is %s, want DEAD_LETTERED", failed.Status)
	}
	// LeaseJob raised its priority above every other; put it back, so
	// that the next LeaseJob, not this job once requeued, wins.
	testdb.Exec(t, pool, `UPDATE job_queue SET priority = 100 WHERE id = $1`, failed.ID)
	failed.Priority = 100
	return failed
}

// canceledLive leases a job of scope and cancels it: CANCELED with the
// lease of its canceled attempt still live (30 s).
func canceledLive(t testing.TB, ctx context.Context, pool *pgxpool.Pool, scope runledger.Scope) runledger.Job {
	t.Helper()
	testdb.DefineType(t, pool, "charge.capture")
	j := testdb.Leased(t, ctx, pool, jobs.EnqueueRequest{Scope: scope, JobType: "charge.capture"})
	c, err := jobs.Cancel(ctx, pool, jobs.CancelRequest{Scope: scope, JobID: j.ID, Reason: "operator"})
	if err != nil {
		t.Fatalf("Cancel: %v", err)
	}
	if c.Status != runledger.JobStatusCanceled || c.LeaseExpiresAt == nil {
		t.Fatalf("canceled job %+v, want CANCELED with its lease", c)
	}
	return c
}

// request is the request to requeue j as observed, with reason.
func request(t testing.TB, j runledger.Job, reason string) requeue.Request {
	t.Helper()
	req, err := requeue.FromJob(j, requeue.PreserveProgress, reason)
	if err != nil {
		t.Fatalf("FromJob: %v", err)
	}
	return req
}

// mustRequeued fails unless the call requeued, and returns the outcome.
func mustRequeued(t testing.TB) func(requeue.Outcome, error) requeue.Requeued {
	return func(o requeue.Outcome, err error) requeue.Requeued {
		t.Helper()
		if err != nil {
			t.Fatalf("requeue: %v", err)
		}
		r, ok := o.(requeue.Requeued)
		if !ok {
			t.Fatalf("requeue outcome %T %+v, want Requeued", o, o)
		}
		return r
	}
}

// requeuedEvents counts the job's REQUEUED events.
func requeuedEvents(t testing.TB, pool *pgxpool.Pool, id uuid.UUID) int64 {
	t.Helper()
	return testdb.Scalar[int64](t, pool, `SELECT count(*) FROM job_events WHERE job_id = $1 AND event_type = 'REQUEUED'`, id)
}

func wantCode(t testing.TB, err error, code runledger.Code) {
	t.Helper()
	if !errors.Is(err, code) {
		t.Fatalf("err = %v, want %s", err, code)
	}
}
