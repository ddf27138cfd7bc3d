package health_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/health"
	"github.com/runledger-go/runledger/internal/testdb"
	"github.com/runledger-go/runledger/jobs"
)

// Example reads the queue's health and then prunes finished jobs older
// than 30 days, first as a dry run. It needs a migrated database in
// DATABASE_URL, so it is compiled but not run; TestExampleHealth runs the
// same steps against a test database.
func Example() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	if err := exampleHealth(ctx, pool, os.Stdout); err != nil {
		log.Fatal(err)
	}
}

// exampleHealth is the body of Example, shared with TestExampleHealth.
func exampleHealth(ctx context.Context, pool *pgxpool.Pool, out io.Writer) error {
	// Every tenant (Scope nil), every type, finished counts over the last
	// hour. One statement, no lock; its cost follows the live queue.
	stats, err := health.GetStats(ctx, pool, health.StatsRequest{Window: time.Hour})
	if err != nil {
		return err
	}
	for _, t := range stats.Types {
		fmt.Fprintf(out, "%s: %d due, %d leased, %d succeeded in the last hour\n",
			t.JobType, t.PendingDue, t.Leased, t.Succeeded)
	}

	// Retention: the cutoff is measured on the database clock. A dry run
	// takes the same locks and reports what would go, then rolls back.
	req := health.PruneRequest{OlderThan: 30 * 24 * time.Hour, Statuses: []runledger.JobStatus{runledger.JobStatusSucceeded}, DryRun: true}
	dry, err := health.Prune(ctx, pool, req)
	if err != nil {
		return err
	}
	req.DryRun = false
	done, err := health.Prune(ctx, pool, req)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "dry run: %d jobs; pruned: %d jobs, %d events\n", dry.DeletedJobs, done.DeletedJobs, done.DeletedEvents)
	return nil
}

func TestExampleHealth(t *testing.T) {
	t.Parallel()
	ctx := testdb.Context(t)
	pool := testdb.New(t)
	testdb.DefineType(t, pool, "send_invoice")
	// One due job, one leased, and one that succeeded 40 days ago.
	if _, err := jobs.Enqueue(ctx, pool, jobs.EnqueueRequest{JobType: "send_invoice"}); err != nil {
		t.Fatal(err)
	}
	testdb.Leased(t, ctx, pool, jobs.EnqueueRequest{JobType: "send_invoice"})
	src := testdb.Succeeded(runledger.Global())
	src.JobType = "send_invoice"
	old := testdb.Seed(t, pool, src)
	testdb.Exec(t, pool, `UPDATE job_queue SET started_at = now() - interval '40 days 1 minute',
		finished_at = now() - interval '40 days' WHERE id = $1`, old)

	var out bytes.Buffer
	if err := exampleHealth(ctx, pool, &out); err != nil {
		t.Fatal(err)
	}
	want := "send_invoice: 1 due, 1 leased, 0 succeeded in the last hour\n" +
		"dry run: 1 jobs; pruned: 1 jobs, 0 events\n"
	if out.String() != want {
		t.Fatalf("example printed\n%s\nwant\n%s", out.String(), want)
	}
}
