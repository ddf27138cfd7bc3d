package lease_test

import (
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/internal/testdb"
	"github.com/runledger-go/runledger/jobs"
	"github.com/runledger-go/runledger/lease"
)

func heartbeatFor(j runledger.Job) lease.HeartbeatRequest {
	return lease.HeartbeatRequest{JobID: j.ID, RunNumber: j.RunNumber, Attempt: j.Attempt, WorkerID: *j.WorkerID, Lease: time.Minute}
}

// expire moves a lease's end into the past by the database clock.
func expire(t *testing.T, q testdb.Querier, id uuid.UUID) {
	t.Helper()
	testdb.Exec(t, q, `UPDATE job_queue SET lease_expires_at = now() - interval '1 millisecond' WHERE id = $1`, id)
}

// A heartbeat extends the lease from the database clock and renews the
// resource claim; a plain one writes no event, one that changes progress
// or the checkpoint writes one PROGRESS event, and repeating the same
// progress writes none.
func TestHeartbeatRenewsTheLeaseAndRecordsChangedProgress(t *testing.T) {
	t.Parallel()
	ctx, pool := setup(t)
	l := testdb.Leased(t, ctx, pool, jobs.EnqueueRequest{ExecutionResourceKey: "printer"})
	before := testdb.Count(t, pool, "job_events")

	r := heartbeatFor(l)
	r.Lease = 10 * time.Minute
	hb, err := lease.Heartbeat(ctx, pool, r)
	if err != nil {
		t.Fatal(err)
	}
	if hb.Recorded || hb.LeaseExpiresAt.Sub(hb.LastHeartbeatAt) != 10*time.Minute {
		t.Fatalf("plain heartbeat = %+v, want the lease 10m past the heartbeat and no event", hb)
	}
	if n := testdb.Count(t, pool, "job_events"); n != before {
		t.Fatalf("a plain heartbeat wrote %d events", n-before)
	}
	claimExpiry := testdb.Scalar[time.Time](t, pool, `SELECT lease_expires_at FROM job_execution_resource_claims WHERE job_id = $1`, l.ID)
	if !claimExpiry.Equal(hb.LeaseExpiresAt) {
		t.Fatalf("resource claim expires %s, want the renewed lease %s", claimExpiry, hb.LeaseExpiresAt)
	}

	r.ProgressDone, r.ProgressTotal = testdb.Ptr[int64](2), testdb.Ptr[int64](5)
	r.Checkpoint = json.RawMessage(`{"cursor": 2}`)
	hb, err = lease.Heartbeat(ctx, pool, r)
	if err != nil || !hb.Recorded || *hb.ProgressDone != 2 || *hb.ProgressTotal != 5 {
		t.Fatalf("progress heartbeat = %+v, %v", hb, err)
	}
	if typ, attempt, _, _ := lastEvent(t, ctx, pool, l.ID); typ != "PROGRESS" || attempt == nil || *attempt != 1 {
		t.Fatalf("last event %s attempt %v, want PROGRESS of attempt 1", typ, attempt)
	}
	testdb.JSONEqual(t, "checkpoint", testdb.Scalar[[]byte](t, pool, `SELECT checkpoint FROM job_queue WHERE id = $1`, l.ID), `{"cursor":2}`)
	events := testdb.Count(t, pool, "job_events")
	if hb, err = lease.Heartbeat(ctx, pool, r); err != nil || hb.Recorded {
		t.Fatalf("the same progress again = %+v, %v; want no event", hb, err)
	}
	if n := testdb.Count(t, pool, "job_events"); n != events {
		t.Fatalf("an unchanged heartbeat wrote %d events", n-events)
	}
}

// A heartbeat, a completion and a failure are refused once the lease has
// expired by the database clock, even before recovery takes the job back;
// nothing is written. A canceled job refuses them too.
func TestWorkerWritesRefusedAfterTheLeaseExpired(t *testing.T) {
	t.Parallel()
	ctx, pool := setup(t)
	scope := runledger.Global()
	l := testdb.Leased(t, ctx, pool, jobs.EnqueueRequest{})
	expire(t, pool, l.ID)
	before := testdb.Count(t, pool, "job_events")

	_, err := lease.Heartbeat(ctx, pool, heartbeatFor(l))
	testdb.WantCode(t, err, runledger.CodeLeaseMismatch)
	cr := testdb.CompleteRequest(l)
	cr.Scope = &scope
	_, err = lease.Complete(ctx, pool, cr)
	if e := testdb.WantCode(t, err, runledger.CodeLeaseMismatch); !strings.Contains(e.Detail, "expired") {
		t.Fatalf("scoped detail %q does not say the lease expired", e.Detail)
	}
	_, err = lease.Fail(ctx, pool, testdb.FailRequest(l))
	testdb.WantCode(t, err, runledger.CodeLeaseMismatch)
	if st := testdb.Scalar[string](t, pool, `SELECT status::text FROM job_queue WHERE id = $1`, l.ID); st != "LEASED" || testdb.Count(t, pool, "job_events") != before {
		t.Fatalf("job %s, %d events written; want it untouched", st, testdb.Count(t, pool, "job_events")-before)
	}

	c := testdb.Leased(t, ctx, pool, jobs.EnqueueRequest{})
	if _, err := jobs.Cancel(ctx, pool, jobs.CancelRequest{JobID: c.ID}); err != nil {
		t.Fatal(err)
	}
	_, err = lease.Heartbeat(ctx, pool, heartbeatFor(c))
	testdb.WantCode(t, err, runledger.CodeLeaseMismatch)
	_, err = lease.Heartbeat(ctx, pool, lease.HeartbeatRequest{JobID: uuid.New(), RunNumber: 1, Attempt: 1, WorkerID: "w", Lease: time.Minute})
	testdb.WantCode(t, err, runledger.CodeJobNotFound)
}

// A worker whose lease expired races the worker that claims the job after
// recovery: both complete at once, from their own connections; only the
// new lease holder's completion lands, once.
func TestExpiredWorkerRacesTheNewClaimant(t *testing.T) {
	t.Parallel()
	ctx, pool := setup(t)
	j := testdb.Enqueue(t, ctx, pool, jobs.EnqueueRequest{MaxAttempts: testdb.Ptr[int32](3)})
	old := claimOnly(t, ctx, pool, j.ID)
	expire(t, pool, j.ID)
	// Recovery makes the job due after its retry delay; make it due now.
	if rec, err := lease.RecoverExpiredLeases(ctx, pool, 10); err != nil || len(rec) != 1 {
		t.Fatalf("recover: %d, %v", len(rec), err)
	}
	testdb.Exec(t, pool, `UPDATE job_queue SET next_run_at = now() WHERE id = $1`, j.ID)
	fresh := claimOnly(t, ctx, pool, j.ID)
	if fresh.Attempt != 2 {
		t.Fatalf("new claim at attempt %d, want 2", fresh.Attempt)
	}

	var wg sync.WaitGroup
	errs := make([]error, 2)
	start := make(chan struct{})
	for i, l := range []runledger.Job{old, fresh} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			_, errs[i] = lease.Complete(ctx, pool, testdb.CompleteRequest(l))
		}()
	}
	close(start)
	wg.Wait()
	if !errors.Is(errs[0], runledger.CodeLeaseMismatch) || errs[1] != nil {
		t.Fatalf("expired worker: %v; new claimant: %v; want a lease mismatch and a completion", errs[0], errs[1])
	}
	if n := testdb.Scalar[int64](t, pool, `SELECT count(*) FROM job_events WHERE job_id = $1 AND event_type = 'SUCCEEDED'`, j.ID); n != 1 {
		t.Fatalf("%d SUCCEEDED events, want 1", n)
	}
	if a := testdb.Scalar[int32](t, pool, `SELECT attempt FROM job_queue WHERE id = $1`, j.ID); a != 2 {
		t.Fatalf("completed at attempt %d, want the new claimant's 2", a)
	}
}

// The batch forms take many leases in one statement: each entry is fenced
// on its own lease, a refused one gets a lease mismatch and is left as it
// is, and duplicates or an empty batch are refused before any database
// work.
func TestBatchWritesAreFencedPerEntry(t *testing.T) {
	t.Parallel()
	ctx, pool := setup(t)
	var leased []runledger.Job
	for range 4 {
		leased = append(leased, testdb.Leased(t, ctx, pool, jobs.EnqueueRequest{MaxAttempts: testdb.Ptr[int32](2)}))
	}
	expire(t, pool, leased[3].ID)

	hb := []lease.HeartbeatRequest{heartbeatFor(leased[0]), heartbeatFor(leased[1]), heartbeatFor(leased[2]), heartbeatFor(leased[3])}
	hb[1].ProgressDone = testdb.Ptr[int64](1)
	res, err := lease.HeartbeatMany(ctx, pool, hb)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res {
		if (r.Err == nil) != (i != 3) || (i == 1) != r.Value.Recorded {
			t.Fatalf("heartbeat %d = %+v, %v", i, r.Value, r.Err)
		}
	}
	testdb.WantCode(t, res[3].Err, runledger.CodeLeaseMismatch)

	done, err := lease.CompleteMany(ctx, pool, []lease.CompleteRequest{
		{JobID: leased[0].ID, RunNumber: 1, Attempt: 1, WorkerID: *leased[0].WorkerID, Output: json.RawMessage(`{"n":0}`)},
		{JobID: leased[3].ID, RunNumber: 1, Attempt: 1, WorkerID: *leased[3].WorkerID},
	})
	if err != nil || done[0].Err != nil || done[0].Value.Status != runledger.JobStatusSucceeded || done[1].Err == nil {
		t.Fatalf("complete many = %+v, %v", done, err)
	}
	failed, err := lease.FailMany(ctx, pool, []lease.FailRequest{
		{JobID: leased[1].ID, RunNumber: 1, Attempt: 1, WorkerID: *leased[1].WorkerID, Kind: runledger.FailureTimeout, RetryDelay: testdb.Ptr(time.Duration(0))},
		{JobID: leased[2].ID, RunNumber: 1, Attempt: 1, WorkerID: *leased[2].WorkerID, Kind: runledger.FailurePanicked, ErrorCode: "worker.panicked"},
	})
	if err != nil || failed[0].Value.Status != runledger.JobStatusPending || failed[1].Value.Status != runledger.JobStatusDeadLettered {
		t.Fatalf("fail many = %+v, %v; want a TIMEOUT retry and a PANICKED dead letter", failed, err)
	}
	for i, want := range []string{"TIMEOUT", "PANICKED"} {
		if _, _, payload, _ := lastEvent(t, ctx, pool, failed[i].Value.ID); payload["failure_kind"] != want {
			t.Fatalf("failure kind %v, want %s", payload["failure_kind"], want)
		}
	}

	if _, err := lease.CompleteMany(ctx, testdb.ClosedPool(t), nil); !errors.Is(err, runledger.Code("job.batch_invalid")) {
		t.Fatalf("empty batch: %v", err)
	}
	dup := lease.CompleteRequest{JobID: leased[0].ID, RunNumber: 1, Attempt: 1, WorkerID: "w"}
	if _, err := lease.CompleteMany(ctx, testdb.ClosedPool(t), []lease.CompleteRequest{dup, dup}); !errors.Is(err, runledger.Code("job.batch_invalid")) {
		t.Fatalf("duplicate entries: %v", err)
	}
}

// Release hands an unstarted lease back without spending its attempt: the
// job is PENDING at attempt 0 again, its resource claim released, with a
// STAGE_CHANGED event naming the worker; the next claim is attempt 1.
func TestReleaseHandsBackWithoutSpendingTheAttempt(t *testing.T) {
	t.Parallel()
	ctx, pool := setup(t)
	l := testdb.Leased(t, ctx, pool, jobs.EnqueueRequest{ExecutionResourceKey: "printer"})
	res, err := lease.Release(ctx, pool, []lease.ReleaseRequest{{JobID: l.ID, RunNumber: l.RunNumber, Attempt: l.Attempt, WorkerID: *l.WorkerID}})
	if err != nil || res[0].Err != nil {
		t.Fatalf("release: %+v, %v", res, err)
	}
	j := res[0].Value
	if j.Status != runledger.JobStatusPending || j.Attempt != 0 || j.WorkerID != nil || j.LeaseExpiresAt != nil || j.Stage != runledger.JobStageQueued {
		t.Fatalf("released job = %+v", j)
	}
	typ, attempt, payload, _ := lastEvent(t, ctx, pool, l.ID)
	if typ != "STAGE_CHANGED" || attempt == nil || *attempt != 1 || payload["worker_id"] != *l.WorkerID {
		t.Fatalf("event %s attempt %v payload %v", typ, attempt, payload)
	}
	if n := testdb.Count(t, pool, "job_execution_resource_claims"); n != 0 {
		t.Fatalf("%d resource claims left", n)
	}
	// The released lease is gone: releasing it again is refused.
	res, err = lease.Release(ctx, pool, []lease.ReleaseRequest{{JobID: l.ID, RunNumber: l.RunNumber, Attempt: l.Attempt, WorkerID: *l.WorkerID}})
	if err != nil || !errors.Is(res[0].Err, runledger.CodeLeaseMismatch) {
		t.Fatalf("second release: %+v, %v", res, err)
	}
	if again := claimOnly(t, ctx, pool, l.ID); again.Attempt != 1 {
		t.Fatalf("claimed again at attempt %d, want 1", again.Attempt)
	}
}
