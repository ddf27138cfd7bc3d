package jobs_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/internal/testdb"
	"github.com/runledger-go/runledger/jobs"
)

// examplePool returns a pool on a fresh migrated database of the test
// kit, with job type "email" defined; in an application it is the pool
// of your database (pgxpool.New with its URL).
func examplePool(ctx context.Context) *pgxpool.Pool {
	url, err := testdb.NewURLForExample()
	if err != nil {
		log.Fatal(err)
	}
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := jobs.UpsertDefinition(ctx, pool, jobs.DefinitionInput{JobType: "email"}); err != nil {
		log.Fatal(err)
	}
	return pool
}

// ExampleUpsertDefinition defines a job type: settings left nil take the
// defaults, and a changed definition gets a new version.
func ExampleUpsertDefinition() {
	ctx := context.Background()
	pool := examplePool(ctx)
	defer pool.Close()

	d, err := jobs.UpsertDefinition(ctx, pool, jobs.DefinitionInput{JobType: "report.render"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(d.JobType, "version", d.Version, "attempts", d.MaxAttempts, "timeout", d.DefaultTimeoutSeconds, "enabled", d.Enabled)

	three := int32(3)
	d, err = jobs.UpsertDefinition(ctx, pool, jobs.DefinitionInput{JobType: "report.render", MaxAttempts: &three})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(d.JobType, "version", d.Version, "attempts", d.MaxAttempts)
	// Output:
	// report.render version 1 attempts 8 timeout 900 enabled true
	// report.render version 2 attempts 3
}

// ExampleEnqueue enqueues a job keyed by the caller's own id for the
// work: repeating the request (after a lost reply, say) returns the same
// job instead of a second one.
func ExampleEnqueue() {
	ctx := context.Background()
	pool := examplePool(ctx)
	defer pool.Close()

	req := jobs.EnqueueRequest{
		Scope:          runledger.Organization(uuid.MustParse("0190e0a4-7a1c-7000-8000-00000000a11c")),
		JobType:        "email",
		Payload:        json.RawMessage(`{"to":"ada@example.com"}`),
		IdempotencyKey: "welcome:ada",
	}
	first, err := jobs.Enqueue(ctx, pool, req)
	if err != nil {
		log.Fatal(err)
	}
	again, err := jobs.Enqueue(ctx, pool, req)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(first.Disposition, first.Job.Status, first.Job.Stage, string(first.Job.Payload))
	fmt.Println(again.Disposition, again.Job.ID == first.Job.ID)

	// The same key with another payload is a conflict, not a second job.
	req.Payload = json.RawMessage(`{"to":"grace@example.com"}`)
	_, err = jobs.Enqueue(ctx, pool, req)
	fmt.Println(runledger.CodeOf(err))
	// Output:
	// inserted PENDING queued {"to": "ada@example.com"}
	// existing true
	// job.idempotency_conflict
}

// ExampleEnqueueMany enqueues a batch in one transaction: every request
// gets a result in input order, and a refused request does not refuse
// the others.
func ExampleEnqueueMany() {
	ctx := context.Background()
	pool := examplePool(ctx)
	defer pool.Close()

	results, err := jobs.EnqueueMany(ctx, pool, []jobs.EnqueueRequest{
		{JobType: "email", IdempotencyKey: "digest:1"},
		{JobType: "email", Payload: json.RawMessage(`{"broken"`)},
		{JobType: "email", IdempotencyKey: "digest:1"},
		{JobType: "no-such-type"},
	})
	if err != nil {
		log.Fatal(err) // the batch as a whole failed: nothing was written
	}
	for i, r := range results {
		if r.Err != nil {
			fmt.Println(i, "refused:", runledger.CodeOf(r.Err))
			continue
		}
		fmt.Println(i, r.Disposition, r.Job.Status)
	}
	// Output:
	// 0 inserted PENDING
	// 1 refused: job.payload_invalid
	// 2 existing PENDING
	// 3 refused: job.definition_not_found_or_disabled
}

// ExampleCancel cancels a job that has not run yet; canceling it again
// is refused, since a canceled job is final.
func ExampleCancel() {
	ctx := context.Background()
	pool := examplePool(ctx)
	defer pool.Close()

	enq, err := jobs.Enqueue(ctx, pool, jobs.EnqueueRequest{JobType: "email"})
	if err != nil {
		log.Fatal(err)
	}
	req := jobs.CancelRequest{Scope: runledger.Global(), JobID: enq.Job.ID, Reason: "customer unsubscribed", Operator: "ops@example.com"}
	job, err := jobs.Cancel(ctx, pool, req)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(job.Status)
	_, err = jobs.Cancel(ctx, pool, req)
	fmt.Println(runledger.CodeOf(err))
	// Output:
	// CANCELED
	// job.not_cancelable
}

// ExamplePauseType pauses a job type: enqueues are still accepted, and
// claims pass its jobs over until ResumeType.
func ExamplePauseType() {
	ctx := context.Background()
	pool := examplePool(ctx)
	defer pool.Close()

	d, err := jobs.PauseType(ctx, pool, "email")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(d.JobType, "paused:", d.Paused)
	if d, err = jobs.ResumeType(ctx, pool, "email"); err != nil {
		log.Fatal(err)
	}
	fmt.Println(d.JobType, "paused:", d.Paused)
	// Output:
	// email paused: true
	// email paused: false
}
