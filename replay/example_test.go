package replay_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/jobs"
	"github.com/runledger-go/runledger/lease"
	"github.com/runledger-go/runledger/replay"
)

// Example replays a succeeded job in a transaction of its own, then retries
// the same request, which returns the same replay.
func Example() {
	ctx := context.Background()
	pool, source := exampleSetup(ctx) // a pool and a job that finished SUCCEEDED at run 1
	defer pool.Close()

	req := replay.Request{
		Scope:             runledger.ScopeOf(source.OrganizationID), // the tenant the caller authorized
		SourceJobID:       source.ID,
		ExpectedRunNumber: source.RunNumber, // the run the caller saw succeed
		Key:               "ticket-4711",    // one key per intended replay; reuse it to retry
		Reason:            "customer asked for a resend",
	}
	for i := 0; i < 2; i++ {
		out, err := replay.SucceededJob(ctx, pool, req)
		switch {
		case errors.Is(err, runledger.CodeReplayIdempotencyConflict):
			log.Fatal("this key was used with another reason")
		case errors.Is(err, runledger.ErrCommitUnconfirmed):
			continue // unknown outcome: the same request again finds out
		case err != nil:
			log.Fatal(err)
		}
		fmt.Println(replay.Match(out,
			func(r replay.Replayed) string {
				return fmt.Sprintf("replayed (%s): %s at run %d", r.Disposition, r.Replay.Status, r.Replay.RunNumber)
			},
			func(m replay.ExpectationMismatch) string {
				return fmt.Sprintf("not replayed: the job is %s at run %d", m.Actual.Status, m.Actual.RunNumber)
			},
			func(replay.NotFound) string { return "no such job" }))
	}
	// Output:
	// replayed (inserted): PENDING at run 1
	// replayed (existing): PENDING at run 1
}

// ExampleSucceededJobTx replays a job inside the caller's transaction,
// together with the caller's own writes: both commit or neither does.
func ExampleSucceededJobTx() {
	ctx := context.Background()
	pool, source := exampleSetup(ctx)
	defer pool.Close()

	tx, err := pool.Begin(ctx) // READ COMMITTED, PostgreSQL's default
	if err != nil {
		log.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // a no-op after Commit

	out, err := replay.SucceededJobTx(ctx, tx, replay.Request{
		Scope: runledger.ScopeOf(source.OrganizationID), SourceJobID: source.ID,
		ExpectedRunNumber: source.RunNumber, Key: "ticket-4712", Reason: "backfill",
	})
	if err != nil {
		log.Fatal(err) // the deferred rollback undoes everything
	}
	r, ok := out.(replay.Replayed)
	if !ok {
		log.Fatalf("not replayed: %T", out)
	}
	// ... the application's own writes in tx, e.g. an audit row naming
	// r.Replay.JobID ...
	if err := tx.Commit(ctx); err != nil {
		log.Fatal(err)
	}
	from, err := replay.Origin(ctx, pool, runledger.ScopeOf(source.OrganizationID), r.Replay.JobID)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(r.Disposition, from.SourceJobID == source.ID, from.Reason)
	// Output: inserted true backfill
}

// exampleSetup gives the examples a fresh database holding one succeeded
// job (in an application: pgxpool.New with your database URL, and a job id
// you read from it).
func exampleSetup(ctx context.Context) (*pgxpool.Pool, runledger.Job) {
	url, err := testdbURLForExample()
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
	org := uuid.New()
	enq, err := jobs.Enqueue(ctx, pool, jobs.EnqueueRequest{Scope: runledger.Organization(org), JobType: "email"})
	if err != nil {
		log.Fatal(err)
	}
	leased, err := lease.Claim(ctx, pool, lease.ClaimRequest{WorkerID: "w", Limit: 1, Lease: time.Minute})
	if err != nil || len(leased) != 1 {
		log.Fatal(err)
	}
	done, err := lease.Complete(ctx, pool, lease.CompleteRequest{JobID: enq.Job.ID, RunNumber: 1, Attempt: 1, WorkerID: "w"})
	if err != nil {
		log.Fatal(err)
	}
	return pool, done
}
