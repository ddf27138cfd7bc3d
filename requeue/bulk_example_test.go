package requeue_test

import (
	"context"
	"fmt"
	"log"

	"github.com/runledger-go/runledger/requeue"
)

// ExampleJobTx requeues a dead-lettered job inside the caller's
// transaction, together with the caller's own writes: both commit or
// neither does. The job's requeue history then holds the request.
func ExampleJobTx() {
	ctx := context.Background()
	pool, dead := exampleSetup(ctx) // a pool and a job that dead-lettered at run 1
	defer pool.Close()

	req, err := requeue.FromJob(dead, requeue.ResetProgress, "card data fixed")
	if err != nil {
		log.Fatal(err)
	}
	tx, err := pool.Begin(ctx) // READ COMMITTED, PostgreSQL's default
	if err != nil {
		log.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // a no-op after Commit

	out, err := requeue.JobTx(ctx, tx, req)
	if err != nil {
		log.Fatal(err) // the deferred rollback undoes everything
	}
	r, ok := out.(requeue.Requeued)
	if !ok {
		log.Fatalf("not requeued: %T", out)
	}
	// ... the application's own writes in tx, e.g. an audit row ...
	if err := tx.Commit(ctx); err != nil {
		log.Fatal(err)
	}
	history, err := requeue.History(ctx, pool, req.Scope, dead.ID)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s: %s at run %d -> %s at run %d\n", r.Disposition, r.Before.Status, r.Before.RunNumber, r.After.Status, r.After.RunNumber)
	fmt.Printf("history: run %d, %q, %s\n", history[0].FromRunNumber, history[0].Reason, history[0].StatePolicy)
	// Output:
	// inserted: DEAD_LETTERED at run 1 -> PENDING at run 2
	// history: run 1, "card data fixed", reset_progress_and_checkpoint
}

// ExampleBulk requeues every job of one tenant that dead-lettered with a
// given error code, in chunks, after counting what the filter selects.
// Run again, the filter finds nothing: the requeued jobs are PENDING now.
func ExampleBulk() {
	ctx := context.Background()
	pool, dead := exampleSetup(ctx) // a job that dead-lettered with provider.down
	defer pool.Close()

	req := requeue.BulkRequest{
		Scope:     dead.Scope(),
		Reason:    "payment provider is back",
		Operator:  "alice@example.com", // recorded in each REQUEUED event
		Filter:    &requeue.Filter{Status: requeue.DeadLettered, ErrorCode: "provider.down"},
		ChunkSize: 500,
		Rate:      100, // at most 100 requeues a second
	}
	n, err := requeue.BulkCount(ctx, pool, req)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("selected:", n)
	for range 2 {
		sum, err := requeue.Bulk(ctx, pool, req, func(c requeue.BulkChunk) error {
			return nil // c.Total is the running summary: report progress here
		})
		if err != nil {
			log.Fatal(err) // resumable: the same request again skips what is done
		}
		fmt.Printf("requeued %d, existing %d, refused %d\n", sum.Requeued, sum.Existing, sum.Refused())
	}
	// Output:
	// selected: 1
	// requeued 1, existing 0, refused 0
	// requeued 0, existing 0, refused 0
}
