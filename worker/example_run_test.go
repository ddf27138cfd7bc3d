package worker_test

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
	"github.com/runledger-go/runledger/worker"
)

// ExampleRegister registers a handler for one job type, runs the worker,
// enqueues a job and stops the worker once the job's outcome is
// committed. The handler's output is stored with the job.
func ExampleRegister() {
	ctx := context.Background()
	pool := exampleSetup(ctx) // a pool on a migrated database with the send_invoice type defined
	defer pool.Close()

	finished := make(chan worker.Finished, 1)
	w, err := worker.New(pool, worker.Config{
		Concurrency: 4,
		Lease:       30 * time.Second,
		OnFinished:  func(f worker.Finished) { finished <- f }, // after each outcome's commit
	})
	if err != nil {
		log.Fatal(err)
	}
	err = worker.Register(w, "send_invoice", func(ctx context.Context, job worker.Job[Invoice]) (any, error) {
		if job.Payload.To == "" {
			return nil, worker.Terminal(errNoAddress) // dead-lettered, not retried
		}
		// ... send it, honouring ctx ...
		return map[string]any{"sent_to": job.Payload.To}, nil
	})
	if err != nil {
		log.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(runCtx) }()

	payload, _ := json.Marshal(Invoice{Number: 1042, To: "ap@example.com"})
	if _, err := jobs.Enqueue(ctx, pool, jobs.EnqueueRequest{Scope: runledger.Global(), JobType: "send_invoice", Payload: payload}); err != nil {
		log.Fatal(err)
	}
	f := <-finished
	fmt.Println(f.Outcome, f.Job.Status, string(f.Job.Output))

	stop() // Run returns once running handlers are done
	if err := <-done; err != nil {
		log.Fatal(err)
	}
	// Output: succeeded SUCCEEDED {"sent_to": "ap@example.com"}
}

// exampleSetup gives the example a fresh database with the send_invoice
// job type defined (in an application: pgxpool.New with your database URL;
// the job types are defined once, at deploy time).
func exampleSetup(ctx context.Context) *pgxpool.Pool {
	url, err := testdb.NewURLForExample()
	if err != nil {
		log.Fatal(err)
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		log.Fatal(err)
	}
	cfg.MaxConns = 8 // a worker holds a connection per running handler, and some for claims and commits
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := jobs.UpsertDefinition(ctx, pool, jobs.DefinitionInput{JobType: "send_invoice"}); err != nil {
		log.Fatal(err)
	}
	return pool
}
