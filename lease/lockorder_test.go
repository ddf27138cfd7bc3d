package lease_test

import (
	"bytes"
	"context"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/internal/testdb"
	"github.com/runledger-go/runledger/jobs"
	"github.com/runledger-go/runledger/lease"
)

// TestWorkerWritesLockInIDOrder races a heartbeat round and a completion
// batch of one worker over the same leases, given in different orders, in
// the interleaving that deadlocks when a statement locks its rows in the
// order of its input (as a hash join probing the input array does): a
// third transaction holds the highest id; the heartbeat, whose input
// starts with that id, waits behind it; then the completion, whose input
// is in ascending order, starts. Locking in id order, the heartbeat takes
// every other lease before it waits, the completion queues behind it, and
// both finish once the holder lets go. Locking in input order, the
// completion would take every lease but the highest and wait for it, while
// the heartbeat, once it has the highest, waits for the completion's: a
// deadlock, reported as a transient error to one of them.
func TestWorkerWritesLockInIDOrder(t *testing.T) {
	t.Parallel()
	ctx, pool := setup(t)
	const n = 40
	for range n {
		testdb.Enqueue(t, ctx, pool, jobs.EnqueueRequest{JobType: "email"})
	}
	leased := testdb.Claim(t, ctx, pool, lease.ClaimRequest{Limit: n, Lease: time.Minute})
	if len(leased) != n {
		t.Fatalf("claimed %d jobs, want %d", len(leased), n)
	}
	testdb.Exec(t, pool, `ANALYZE job_queue`)
	ascending := slices.Clone(leased)
	slices.SortFunc(ascending, func(a, b runledger.Job) int { return bytes.Compare(a.ID[:], b.ID[:]) })
	high := ascending[n-1]
	// The heartbeat's input: the highest id first, then the rest shuffled.
	beatOrder := append([]runledger.Job{high}, ascending[:n-1]...)
	rand.New(rand.NewPCG(1, 2)).Shuffle(n-1, func(i, j int) { beatOrder[i+1], beatOrder[j+1] = beatOrder[j+1], beatOrder[i+1] })
	deadlocksBefore := deadlocks(t, ctx, pool)

	holder := testdb.Begin(t, ctx, pool)
	testdb.LockJob(t, holder, high.ID, "NO KEY UPDATE")

	beatConn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer beatConn.Release()
	beatTx := testdb.Begin(t, ctx, beatConn)
	beats := make([]lease.HeartbeatRequest, n)
	for i, j := range beatOrder {
		s := j.Scope()
		beats[i] = lease.HeartbeatRequest{Scope: &s, JobID: j.ID, RunNumber: j.RunNumber, Attempt: j.Attempt,
			WorkerID: *j.WorkerID, Lease: time.Minute}
	}
	beatDone := make(chan error, 1)
	go func() {
		res, err := lease.HeartbeatManyTx(ctx, beatTx, beats)
		if err == nil {
			err = firstErr(res)
		}
		beatDone <- err
	}()
	testdb.WaitBlocked(t, pool, beatConn.Conn().PgConn().PID())

	completeConn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer completeConn.Release()
	completeTx := testdb.Begin(t, ctx, completeConn)
	completions := make([]lease.CompleteRequest, n)
	for i, j := range ascending {
		completions[i] = testdb.CompleteRequest(j)
	}
	completeDone := make(chan error, 1)
	go func() {
		res, err := lease.CompleteManyTx(ctx, completeTx, completions)
		if err == nil {
			err = firstErr(res)
		}
		completeDone <- err
	}()
	testdb.WaitBlocked(t, pool, completeConn.Conn().PgConn().PID())

	if err := holder.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-beatDone; err != nil {
		t.Fatalf("heartbeat: %v", err)
	}
	commit(t, ctx, beatTx)
	if err := <-completeDone; err != nil {
		t.Fatalf("completion: %v", err)
	}
	commit(t, ctx, completeTx)
	if got := testdb.Scalar[int64](t, pool, `SELECT count(*) FROM job_queue WHERE status = 'SUCCEEDED'`); got != n {
		t.Errorf("%d jobs SUCCEEDED, want %d", got, n)
	}
	if d := deadlocks(t, ctx, pool) - deadlocksBefore; d != 0 {
		t.Errorf("the server counted %d deadlocks", d)
	}
}

// TestFailStoresProgressAndCheckpoint checks that a failure records the
// progress and checkpoint the attempt reported with it (the retry resumes
// from them), puts the progress in its event, and keeps the stored values
// when it gives none.
func TestFailStoresProgressAndCheckpoint(t *testing.T) {
	t.Parallel()
	ctx, pool := setup(t)
	j := testdb.Leased(t, ctx, pool, jobs.EnqueueRequest{JobType: "email"})
	req := testdb.FailRequest(j)
	req.ProgressDone, req.ProgressTotal = testdb.Ptr[int64](3), testdb.Ptr[int64](10)
	req.Checkpoint = []byte(`{"page": 3}`)
	got, err := lease.Fail(ctx, pool, req)
	if err != nil {
		t.Fatalf("Fail: %v", err)
	}
	if got.Status != runledger.JobStatusPending || got.ProgressDone == nil || *got.ProgressDone != 3 ||
		got.ProgressTotal == nil || *got.ProgressTotal != 10 {
		t.Fatalf("after the failure: status %s, progress %v of %v; want PENDING, 3 of 10", got.Status, got.ProgressDone, got.ProgressTotal)
	}
	if cp := testdb.Scalar[string](t, pool, `SELECT checkpoint::text FROM job_queue WHERE id = $1`, j.ID); cp != `{"page": 3}` {
		t.Errorf("checkpoint = %s, want {\"page\": 3}", cp)
	}
	if got := testdb.Scalar[string](t, pool, `SELECT progress_done || ' of ' || progress_total FROM job_events
		WHERE job_id = $1 AND event_type = 'RETRY_SCHEDULED'`, j.ID); got != "3 of 10" {
		t.Errorf("RETRY_SCHEDULED event progress = %s, want 3 of 10", got)
	}

	// The retry's attempt sees the checkpoint; failing it without progress
	// or checkpoint keeps both.
	testdb.Exec(t, pool, `UPDATE job_queue SET next_run_at = now() WHERE id = $1`, j.ID)
	retry := testdb.LeaseJob(t, ctx, pool, j.ID)
	if string(retry.Checkpoint) != `{"page": 3}` {
		t.Fatalf("the retry's checkpoint = %s, want {\"page\": 3}", retry.Checkpoint)
	}
	if _, err := lease.Fail(ctx, pool, testdb.FailRequest(retry)); err != nil {
		t.Fatalf("Fail: %v", err)
	}
	if cp := testdb.Scalar[string](t, pool, `SELECT checkpoint::text FROM job_queue WHERE id = $1`, j.ID); cp != `{"page": 3}` {
		t.Errorf("checkpoint after a failure without one = %s, want it kept", cp)
	}
}

// TestFailValidatesProgressAndCheckpoint checks that a failure's progress
// and checkpoint are refused as a heartbeat's are, before any database
// work.
func TestFailValidatesProgressAndCheckpoint(t *testing.T) {
	t.Parallel()
	base := lease.FailRequest{WorkerID: "w"}
	bad := base
	bad.ProgressDone, bad.ProgressTotal = testdb.Ptr[int64](5), testdb.Ptr[int64](4)
	testdb.WantCode(t, bad.Validate(), "job.progress_invalid")
	bad = base
	bad.Checkpoint = []byte(`{"a":`)
	testdb.WantCode(t, bad.Validate(), "job.checkpoint_invalid")
	bad = base
	bad.Checkpoint, bad.MaxCheckpointBytes = []byte(`"12345"`), 4
	testdb.WantCode(t, bad.Validate(), "job.checkpoint_too_large")
}

// deadlocks is the server's count of deadlocks in the current database,
// with the statistics snapshot cleared so that the count is fresh.
func deadlocks(t *testing.T, ctx context.Context, q testdb.Querier) int64 {
	t.Helper()
	testdb.Exec(t, q, `SELECT pg_stat_clear_snapshot()`)
	return testdb.Scalar[int64](t, q, `SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()`)
}

func firstErr[T any](res []lease.Result[T]) error {
	for _, r := range res {
		if r.Err != nil {
			return r.Err
		}
	}
	return nil
}

func commit(t *testing.T, ctx context.Context, tx pgx.Tx) {
	t.Helper()
	if err := tx.Commit(ctx); err != nil {
		t.Fatalf("commit: %v", err)
	}
}
