package jobs_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/inspect"
	"github.com/runledger-go/runledger/internal/testdb"
	"github.com/runledger-go/runledger/jobs"
	"github.com/runledger-go/runledger/lease"
)

// Example shows the life of a job: define its type, enqueue it, lease it
// to a worker and complete it. It needs a migrated database in
// DATABASE_URL, so it is compiled but not run; TestExampleFlow runs the
// same steps against a test database.
func Example() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	if err := exampleFlow(ctx, pool, os.Stdout); err != nil {
		log.Fatal(err)
	}
}

// exampleFlow is the body of Example, shared with TestExampleFlow.
func exampleFlow(ctx context.Context, pool *pgxpool.Pool, out io.Writer) error {
	if _, err := jobs.UpsertDefinition(ctx, pool, jobs.DefinitionInput{JobType: "send_invoice", MaxAttempts: testdb.Ptr(int32(3))}); err != nil {
		return err
	}

	// A keyed enqueue is idempotent: repeating it returns the same job.
	req := jobs.EnqueueRequest{
		Scope:          runledger.Global(),
		JobType:        "send_invoice",
		Payload:        json.RawMessage(`{"invoice":1042}`),
		IdempotencyKey: "invoice-1042",
	}
	enq, err := jobs.Enqueue(ctx, pool, req)
	if err != nil {
		return err
	}
	again, err := jobs.Enqueue(ctx, pool, req)
	if err != nil {
		return err
	}
	fmt.Fprintln(out, enq.Disposition, again.Disposition, again.Job.ID == enq.Job.ID)

	leased, err := lease.Claim(ctx, pool, lease.ClaimRequest{WorkerID: "worker-a", Limit: 10, Lease: 30 * time.Second})
	if err != nil {
		return err
	}
	for _, j := range leased {
		fmt.Fprintln(out, j.JobType, j.Status, "attempt", j.Attempt)
		done, err := lease.Complete(ctx, pool, lease.CompleteRequest{
			JobID: j.ID, RunNumber: j.RunNumber, Attempt: j.Attempt, WorkerID: "worker-a",
			Output: json.RawMessage(`{"sent":true}`),
		})
		if err != nil {
			return err
		}
		fmt.Fprintln(out, done.Status, string(done.Output))
	}
	events, err := inspect.Events(ctx, pool, runledger.Global(), enq.Job.ID)
	if err != nil {
		return err
	}
	for _, e := range events {
		fmt.Fprintln(out, e.EventType)
	}
	return nil
}

func TestExampleFlow(t *testing.T) {
	t.Parallel()
	ctx, pool := setup(t)
	var out bytes.Buffer
	if err := exampleFlow(ctx, pool, &out); err != nil {
		t.Fatal(err)
	}
	want := `inserted existing true
send_invoice LEASED attempt 1
SUCCEEDED {"sent": true}
ENQUEUED
LEASED
SUCCEEDED
`
	if out.String() != want {
		t.Fatalf("example printed\n%s\nwant\n%s", out.String(), want)
	}
}
