package lease_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/internal/testdb"
	"github.com/runledger-go/runledger/jobs"
	"github.com/runledger-go/runledger/lease"
)

// examplePool returns a pool on a fresh migrated database of the test
// kit with job type "email" defined (3 attempts) and one email job
// enqueued; in an application it is the pool of your database.
func examplePool(ctx context.Context) *pgxpool.Pool {
	url, err := testdb.NewURLForExample()
	if err != nil {
		log.Fatal(err)
	}
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		log.Fatal(err)
	}
	three := int32(3)
	if _, err := jobs.UpsertDefinition(ctx, pool, jobs.DefinitionInput{JobType: "email", MaxAttempts: &three}); err != nil {
		log.Fatal(err)
	}
	if _, err := jobs.Enqueue(ctx, pool, jobs.EnqueueRequest{JobType: "email", Payload: json.RawMessage(`{"to":"ada@example.com"}`)}); err != nil {
		log.Fatal(err)
	}
	return pool
}

// claimOne leases the example's job to worker-a for a minute.
func claimOne(ctx context.Context, pool *pgxpool.Pool) runledger.Job {
	leased, err := lease.Claim(ctx, pool, lease.ClaimRequest{WorkerID: "worker-a", Limit: 1, Lease: time.Minute})
	if err != nil || len(leased) != 1 {
		log.Fatal("claim: ", len(leased), err)
	}
	return leased[0]
}

// ExampleClaim leases due jobs to a worker. Every later write of the
// attempt presents the lease Claim returned: job id, run, attempt and
// worker id.
func ExampleClaim() {
	ctx := context.Background()
	pool := examplePool(ctx)
	defer pool.Close()

	leased, err := lease.Claim(ctx, pool, lease.ClaimRequest{
		WorkerID: "worker-a",
		JobTypes: []string{"email"}, // nil: every type
		Limit:    10,
		Lease:    30 * time.Second,
	})
	if err != nil {
		log.Fatal(err)
	}
	for _, j := range leased {
		fmt.Println(j.JobType, j.Status, "run", j.RunNumber, "attempt", j.Attempt, "worker", *j.WorkerID)
	}
	// Nothing else is due.
	more, err := lease.Claim(ctx, pool, lease.ClaimRequest{WorkerID: "worker-b", Limit: 10, Lease: 30 * time.Second})
	fmt.Println(len(more), err)
	// Output:
	// email LEASED run 1 attempt 1 worker worker-a
	// 0 <nil>
}

// ExampleComplete records a successful attempt with its output.
func ExampleComplete() {
	ctx := context.Background()
	pool := examplePool(ctx)
	defer pool.Close()
	j := claimOne(ctx, pool)

	done, err := lease.Complete(ctx, pool, lease.CompleteRequest{
		JobID: j.ID, RunNumber: j.RunNumber, Attempt: j.Attempt, WorkerID: "worker-a",
		Output: json.RawMessage(`{"message_id":"m-1"}`),
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(done.Status, string(done.Output))

	// The lease is spent: a second completion is refused.
	_, err = lease.Complete(ctx, pool, lease.CompleteRequest{JobID: j.ID, RunNumber: j.RunNumber, Attempt: j.Attempt, WorkerID: "worker-a"})
	fmt.Println(runledger.CodeOf(err))
	// Output:
	// SUCCEEDED {"message_id": "m-1"}
	// job.lease_mismatch
}

// ExampleFail records a failed attempt: with attempts left the job is
// retried after a delay, and a terminal failure dead-letters it at once.
func ExampleFail() {
	ctx := context.Background()
	pool := examplePool(ctx)
	defer pool.Close()
	j := claimOne(ctx, pool)

	now := time.Duration(0) // retry at once instead of after Backoff(1)
	retry, err := lease.Fail(ctx, pool, lease.FailRequest{
		JobID: j.ID, RunNumber: j.RunNumber, Attempt: j.Attempt, WorkerID: "worker-a",
		ErrorCode: "smtp.unavailable", ErrorMessage: "connection refused", RetryDelay: &now,
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(retry.Status, "after attempt", retry.Attempt, "of", retry.MaxAttempts)

	j = claimOne(ctx, pool)
	dead, err := lease.Fail(ctx, pool, lease.FailRequest{
		JobID: j.ID, RunNumber: j.RunNumber, Attempt: j.Attempt, WorkerID: "worker-a",
		ErrorCode: "smtp.rejected", ErrorMessage: "no such mailbox", Terminal: true,
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(dead.Status, "after attempt", dead.Attempt, *dead.LastErrorCode)
	// Output:
	// PENDING after attempt 1 of 3
	// DEAD_LETTERED after attempt 2 smtp.rejected
}

// ExampleHeartbeat renews a lease while the handler works, and records
// its progress.
func ExampleHeartbeat() {
	ctx := context.Background()
	pool := examplePool(ctx)
	defer pool.Close()
	j := claimOne(ctx, pool)

	done, total := int64(40), int64(100)
	hb, err := lease.Heartbeat(ctx, pool, lease.HeartbeatRequest{
		JobID: j.ID, RunNumber: j.RunNumber, Attempt: j.Attempt, WorkerID: "worker-a",
		Lease:        2 * time.Minute,
		ProgressDone: &done, ProgressTotal: &total,
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("progress", *hb.ProgressDone, "of", *hb.ProgressTotal, "recorded:", hb.Recorded)
	fmt.Println("lease extended:", hb.LeaseExpiresAt.After(*j.LeaseExpiresAt))
	// Output:
	// progress 40 of 100 recorded: true
	// lease extended: true
}

// ExampleRelease hands a leased job back without spending its attempt,
// as a worker shutting down does with jobs it has not started.
func ExampleRelease() {
	ctx := context.Background()
	pool := examplePool(ctx)
	defer pool.Close()
	j := claimOne(ctx, pool)

	held := lease.ReleaseRequest{JobID: j.ID, RunNumber: j.RunNumber, Attempt: j.Attempt, WorkerID: "worker-a"}
	// One result per request, in input order; a refused entry does not
	// refuse the others.
	for range 2 {
		results, err := lease.Release(ctx, pool, []lease.ReleaseRequest{held})
		if err != nil {
			log.Fatal(err)
		}
		for _, r := range results {
			if r.Err != nil {
				fmt.Println("refused:", runledger.CodeOf(r.Err)) // the lease was already handed back
				continue
			}
			fmt.Println(r.Value.Status, "attempt", r.Value.Attempt)
		}
	}
	// Output:
	// PENDING attempt 0
	// refused: job.lease_mismatch
}

// ExampleRecoverExpiredLeases returns jobs whose lease ran out (their
// worker died or stalled) to PENDING, counting the attempt as failed.
func ExampleRecoverExpiredLeases() {
	ctx := context.Background()
	pool := examplePool(ctx)
	defer pool.Close()
	// A lease of a microsecond has run out by the time recovery looks.
	if _, err := lease.Claim(ctx, pool, lease.ClaimRequest{WorkerID: "worker-a", Limit: 1, Lease: time.Microsecond}); err != nil {
		log.Fatal(err)
	}

	recovered, err := lease.RecoverExpiredLeases(ctx, pool, 100)
	if err != nil {
		log.Fatal(err)
	}
	for _, j := range recovered {
		fmt.Println(j.JobType, j.Status, "after attempt", j.Attempt, *j.LastErrorCode)
	}
	// Output:
	// email PENDING after attempt 1 job.lease_expired
}

// ExampleBackoff prints the default retry delays: they double from one
// second and stop growing at an hour.
func ExampleBackoff() {
	for _, attempt := range []int32{1, 2, 3, 12, 13, 50} {
		fmt.Println(attempt, lease.Backoff(attempt))
	}
	// Output:
	// 1 1s
	// 2 2s
	// 3 4s
	// 12 34m8s
	// 13 1h0m0s
	// 50 1h0m0s
}
