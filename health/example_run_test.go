package health_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/health"
	"github.com/runledger-go/runledger/internal/testdb"
	"github.com/runledger-go/runledger/jobs"
	"github.com/runledger-go/runledger/lease"
)

// ExampleGetStats reads one tenant's queue health per job type: the live
// counts now, the finished ones over the last hour.
func ExampleGetStats() {
	ctx := context.Background()
	pool, scope := exampleSetup(ctx) // a tenant with a due job and two that succeeded (one 40 days ago)
	defer pool.Close()

	stats, err := health.GetStats(ctx, pool, health.StatsRequest{Scope: &scope, Window: time.Hour})
	if err != nil {
		log.Fatal(err)
	}
	for _, t := range stats.Types {
		fmt.Printf("%s: %d due, %d leased, %d succeeded in the last hour, paused %t\n",
			t.JobType, t.PendingDue, t.Leased, t.Succeeded, t.Paused)
	}
	// Output: send_invoice: 1 due, 0 leased, 1 succeeded in the last hour, paused false
}

// ExamplePrune deletes the succeeded jobs that finished more than 30 days
// ago (by the database clock), with their events, after a dry run that
// reports the same without deleting.
func ExamplePrune() {
	ctx := context.Background()
	pool, scope := exampleSetup(ctx)
	defer pool.Close()

	req := health.PruneRequest{
		Scope:     &scope, // nil prunes every tenant
		OlderThan: 30 * 24 * time.Hour,
		Statuses:  []runledger.JobStatus{runledger.JobStatusSucceeded},
		DryRun:    true,
	}
	dry, err := health.Prune(ctx, pool, req)
	if err != nil {
		log.Fatal(err)
	}
	req.DryRun = false
	done, err := health.Prune(ctx, pool, req)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("dry run: %d jobs; pruned: %d jobs\n", dry.DeletedJobs, done.DeletedJobs)
	// Output: dry run: 1 jobs; pruned: 1 jobs
}

// exampleSetup gives the examples a fresh database where one tenant has a
// due send_invoice job, one that succeeded now and one that succeeded 40
// days ago (in an application: pgxpool.New with your database URL).
func exampleSetup(ctx context.Context) (*pgxpool.Pool, runledger.Scope) {
	url, err := testdb.NewURLForExample()
	if err != nil {
		log.Fatal(err)
	}
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := jobs.UpsertDefinition(ctx, pool, jobs.DefinitionInput{JobType: "send_invoice"}); err != nil {
		log.Fatal(err)
	}
	scope := runledger.Organization(uuid.New())
	succeed := func() runledger.Job {
		enq, err := jobs.Enqueue(ctx, pool, jobs.EnqueueRequest{Scope: scope, JobType: "send_invoice"})
		if err != nil {
			log.Fatal(err)
		}
		if leased, err := lease.Claim(ctx, pool, lease.ClaimRequest{WorkerID: "w", Limit: 1, Lease: time.Minute}); err != nil || len(leased) != 1 {
			log.Fatal(err)
		}
		done, err := lease.Complete(ctx, pool, lease.CompleteRequest{JobID: enq.Job.ID, RunNumber: 1, Attempt: 1, WorkerID: "w"})
		if err != nil {
			log.Fatal(err)
		}
		return done
	}
	succeed()
	old := succeed()
	if _, err := pool.Exec(ctx, `UPDATE job_queue SET started_at = now() - interval '40 days 1 minute',
		finished_at = now() - interval '40 days' WHERE id = $1`, old.ID); err != nil {
		log.Fatal(err)
	}
	if _, err := jobs.Enqueue(ctx, pool, jobs.EnqueueRequest{Scope: scope, JobType: "send_invoice"}); err != nil {
		log.Fatal(err)
	}
	return pool, scope
}
