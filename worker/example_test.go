package worker_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"os/signal"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/internal/testdb"
	"github.com/runledger-go/runledger/jobs"
	"github.com/runledger-go/runledger/worker"
)

// Invoice is the payload of the example's job type.
type Invoice struct {
	Number int    `json:"number"`
	To     string `json:"to"`
}

// Example runs jobs of one type until interrupted: register a handler per
// job type, then Run. It needs a migrated database in DATABASE_URL, so it
// is compiled but not run; TestExampleWorker runs the same worker against a
// test database.
func Example() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	w, err := newInvoiceWorker(pool, nil)
	if err != nil {
		log.Fatal(err)
	}
	// Run returns once ctx ends and the worker has shut down: running
	// handlers finished (or were canceled after the shutdown timeout),
	// every outcome committed, nothing of its own left LEASED.
	if err := w.Run(ctx); err != nil {
		log.Fatal(err)
	}
}

// errNoAddress is a failure no retry can fix.
var errNoAddress = errors.New("invoice has no address")

// newInvoiceWorker is the example's worker: a handler for send_invoice
// that reports progress and returns its output.
func newInvoiceWorker(pool *pgxpool.Pool, onFinished func(worker.Finished)) (*worker.Worker, error) {
	w, err := worker.New(pool, worker.Config{
		Concurrency: 20,               // handlers at once
		Lease:       30 * time.Second, // heartbeats every 10s keep it alive
		OnFinished:  onFinished,       // after each outcome's commit
	})
	if err != nil {
		return nil, err
	}
	err = worker.Register(w, "send_invoice", func(ctx context.Context, job worker.Job[Invoice]) (any, error) {
		if job.Payload.To == "" {
			return nil, worker.Terminal(errNoAddress) // dead-lettered, not retried
		}
		// ... send it, honouring ctx (the job's timeout, a lost lease,
		// shutdown) ...
		if err := worker.SetProgress(ctx, 1, 1); err != nil {
			return nil, err
		}
		return map[string]any{"sent": true, "number": job.Payload.Number}, nil // stored as the output
	})
	return w, err
}

// exampleWorker enqueues two invoices, one without an address, runs the
// example's worker until both are done, and prints what became of them.
func exampleWorker(ctx context.Context, pool *pgxpool.Pool, out io.Writer) error {
	if _, err := jobs.UpsertDefinition(ctx, pool, jobs.DefinitionInput{JobType: "send_invoice", MaxAttempts: testdb.Ptr[int32](3)}); err != nil {
		return err
	}
	finished := make(chan worker.Finished, 2)
	w, err := newInvoiceWorker(pool, func(f worker.Finished) { finished <- f })
	if err != nil {
		return err
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan error, 1)
	go func() { done <- w.Run(runCtx) }()
	for _, inv := range []Invoice{{Number: 1042, To: "ap@example.com"}, {Number: 1043}} {
		payload, _ := json.Marshal(inv)
		if _, err := jobs.Enqueue(ctx, pool, jobs.EnqueueRequest{Scope: runledger.Global(), JobType: "send_invoice", Payload: payload}); err != nil {
			return err
		}
		f := <-finished
		fmt.Fprintln(out, f.Outcome, f.Job.Status, string(f.Job.Output))
	}
	stop()
	return <-done
}

func TestExampleWorker(t *testing.T) {
	t.Parallel()
	ctx := testdb.Context(t)
	pool := testdb.OpenPool(t, testdb.NewURL(t), 8, nil)
	var out bytes.Buffer
	if err := exampleWorker(ctx, pool, &out); err != nil {
		t.Fatal(err)
	}
	want := `succeeded SUCCEEDED {"sent": true, "number": 1042}
dead_lettered DEAD_LETTERED 
`
	if out.String() != want {
		t.Fatalf("example printed\n%s\nwant\n%s", out.String(), want)
	}
}
