package requeue_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/internal/testdb"
	"github.com/runledger-go/runledger/jobs"
	"github.com/runledger-go/runledger/lease"
	"github.com/runledger-go/runledger/requeue"
)

// Example requeues a dead-lettered job as the operator saw it, then
// retries the same request (after a lost reply, say), which writes
// nothing and reports the job as it is now.
func Example() {
	ctx := context.Background()
	pool, dead := exampleSetup(ctx) // a pool and a job that dead-lettered at run 1
	defer pool.Close()

	req, err := requeue.FromJob(dead, requeue.PreserveProgress, "payment provider is back")
	if err != nil {
		log.Fatal(err) // not DEAD_LETTERED or CANCELED
	}
	for range 2 {
		out, err := requeue.Job(ctx, pool, req)
		switch {
		case errors.Is(err, runledger.CodeWorkflowManaged):
			log.Fatal("a workflow step owns the job")
		case errors.Is(err, runledger.ErrCommitUnconfirmed):
			continue // unknown outcome: the same request again finds out
		case err != nil:
			log.Fatal(err)
		}
		fmt.Println(requeue.Match(out,
			func(r requeue.Requeued) string {
				return fmt.Sprintf("requeued (%s): %s at run %d", r.Disposition, r.After.Status, r.After.RunNumber)
			},
			func(m requeue.ExpectationMismatch) string {
				return fmt.Sprintf("not requeued: the job is %s at run %d", m.Actual.Status, m.Actual.RunNumber)
			},
			func(n requeue.NotQuiesced) string {
				return "canceled while running: retry after " + n.RetryAfter.Format(time.RFC3339)
			},
			func(requeue.NotFound) string { return "no such job" }))
	}
	// Output:
	// requeued (inserted): PENDING at run 2
	// requeued (existing): PENDING at run 2
}

func exampleSetup(ctx context.Context) (*pgxpool.Pool, runledger.Job) {
	url, err := testdb.NewURLForExample()
	if err != nil {
		log.Fatal(err)
	}
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := jobs.UpsertDefinition(ctx, pool, jobs.DefinitionInput{JobType: "charge.capture", MaxAttempts: ptr(int32(1))}); err != nil {
		log.Fatal(err)
	}
	enq, err := jobs.Enqueue(ctx, pool, jobs.EnqueueRequest{Scope: runledger.Organization(uuid.New()), JobType: "charge.capture"})
	if err != nil {
		log.Fatal(err)
	}
	if leased, err := lease.Claim(ctx, pool, lease.ClaimRequest{WorkerID: "w", Limit: 1, Lease: time.Minute}); err != nil || len(leased) != 1 {
		log.Fatal(err)
	}
	dead, err := lease.Fail(ctx, pool, lease.FailRequest{JobID: enq.Job.ID, RunNumber: 1, Attempt: 1, WorkerID: "w", ErrorCode: "provider.down"})
	if err != nil {
		log.Fatal(err)
	}
	return pool, dead
}

func ptr[T any](v T) *T { return &v }
