package reliability_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/runledger-go/runledger/goose"
	"github.com/runledger-go/runledger/internal/pgserver"
	"github.com/runledger-go/runledger/internal/testdb"
	"github.com/runledger-go/runledger/jobs"
	"github.com/runledger-go/runledger/worker"
)

const (
	workerRestartJobs = 1500
	// workerRestartPace spaces the producer's enqueues: a steady stream
	// over several seconds, so that both restarts meet it and the worker
	// mid-stream.
	workerRestartPace = 3 * time.Millisecond
	typeRestart       = "rl.restart"
)

// startDurableServer starts a dedicated durable server (stopped at
// cleanup), migrates it, and returns it with its URL.
func startDurableServer(t *testing.T, ctx context.Context) (*pgserver.Server, string) {
	t.Helper()
	srv, err := pgserver.Start(ctx, pgserver.Options{Durable: true, Logf: t.Logf})
	if err != nil {
		t.Fatalf("a dedicated server is required (PostgreSQL server binaries): %v", err)
	}
	t.Cleanup(func() {
		if err := srv.Stop(); err != nil {
			t.Errorf("stop server: %v", err)
		}
	})
	url := srv.URL("postgres")
	migrate(t, ctx, url)
	return srv, url
}

// migrate applies the migrations to the database at url.
func migrate(t *testing.T, ctx context.Context, url string) {
	t.Helper()
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	sqlDB := stdlib.OpenDB(*cfg)
	defer sqlDB.Close()
	if err := goose.Up(ctx, sqlDB); err != nil {
		t.Fatal(err)
	}
}

// TestWorkerServerRestartUnderLoad runs a worker (16 handlers, lease 5 s)
// on a dedicated durable server while a producer enqueues 1,500 jobs in a
// steady stream (each with a chosen id, so that a retried enqueue is
// idempotent); the server is stopped in fast mode when a third of them
// are enqueued and in immediate mode (crash recovery) at two thirds, and
// started again each time. Every handler records a side effect and
// returns, one in eight after 100 ms of work, so that handlers, claims,
// heartbeats and batched completions are all in flight when the server
// goes. The worker must reconnect and go on by itself: afterwards every
// enqueued job is SUCCEEDED (none lost), with exactly one SUCCEEDED event
// and exactly one side effect at the attempt that succeeded, no attempt
// ran twice, nothing is LEASED, and the worker reported each job
// succeeded exactly once.
func TestWorkerServerRestartUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("server restart test: skipped under -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	srv, url := startDurableServer(t, ctx)
	admin := openPool(t, url, "rl-admin", 2, nil)
	createEffects(t, admin)
	defineTypes(t, admin, map[string]int32{typeRestart: 10})

	wpool := openPool(t, url, "rl-worker", 12, nil)
	logs := newLogCounter()
	var (
		mu        sync.Mutex
		succeeded = map[uuid.UUID]int{}
		lost      []worker.Finished
		byOutcome = map[worker.Outcome]int{}
		nDone     atomic.Int64
	)
	w := startWorker(t, wpool, worker.Config{WorkerID: "restart-worker", Concurrency: 16, Lease: 5 * time.Second,
		PollInterval: 50 * time.Millisecond, RecoveryInterval: 500 * time.Millisecond, Logger: slog.New(logs),
		OnFinished: func(f worker.Finished) {
			mu.Lock()
			defer mu.Unlock()
			byOutcome[f.Outcome]++
			if f.Outcome == worker.OutcomeLost {
				lost = append(lost, f)
			}
			if f.Outcome == worker.OutcomeSucceeded {
				succeeded[f.Job.ID]++
				nDone.Add(1)
			}
		}},
		func(w *worker.Worker) error {
			return worker.Register(w, typeRestart, func(ctx context.Context, j worker.Job[struct{ N int }]) (any, error) {
				if _, err := wpool.Exec(ctx, `INSERT INTO rl_effects (job_id, attempt, worker_id) VALUES ($1, $2, $3)`,
					j.Record.ID, j.Record.Attempt, w.ID()); err != nil {
					return nil, worker.RetryAfter(0, err)
				}
				if j.Payload.N%8 == 0 {
					time.Sleep(100 * time.Millisecond) // work, not synchronisation
				}
				return nil, nil
			})
		})

	producer := openPool(t, url, "rl-producer", 2, nil)
	var (
		enqueued   atomic.Int64
		ids        = make([]uuid.UUID, 0, workerRestartJobs)
		prodErr    error
		prodErrors = map[string]int{}
	)
	marks := []int64{workerRestartJobs / 3, 2 * workerRestartJobs / 3}
	reached := []chan struct{}{make(chan struct{}), make(chan struct{})}
	produced := make(chan struct{})
	go func() {
		defer close(produced)
		for i := 0; i < workerRestartJobs; i++ {
			req := jobs.EnqueueRequest{JobType: typeRestart, JobID: uuid.Must(uuid.NewV7()), Payload: json.RawMessage(fmt.Sprintf(`{"N": %d}`, i))}
			backoff := 5 * time.Millisecond
			for {
				_, err := jobs.Enqueue(ctx, producer, req)
				if err == nil {
					break
				}
				class := errClass(err)
				if (class != "transient" && class != "commit_unconfirmed") || ctx.Err() != nil {
					prodErr = fmt.Errorf("enqueue %d: %w (%s)", i, err, testdb.Detail(err))
					return
				}
				prodErrors[class+" ("+cause(err)+")"]++
				time.Sleep(backoff) // retry backoff while the server restarts
				backoff = min(2*backoff, 100*time.Millisecond)
			}
			ids = append(ids, req.JobID)
			n := enqueued.Add(1)
			for k, m := range marks {
				if n == m {
					close(reached[k])
				}
			}
			time.Sleep(workerRestartPace) // the stream's pace
		}
	}()

	for k, mode := range []string{"fast", "immediate"} {
		select {
		case <-reached[k]:
		case <-produced:
			t.Fatalf("the producer stopped before the %s restart: %v", mode, prodErr)
		}
		done := nDone.Load()
		if done == 0 || done >= workerRestartJobs {
			t.Fatalf("%d jobs succeeded at the %s restart: the worker is not mid-stream", done, mode)
		}
		t0 := time.Now()
		if err := srv.Restart(ctx, mode); err != nil {
			t.Fatalf("restart %s: %v", mode, err)
		}
		t.Logf("restart %s at %d enqueued, %d succeeded, took %s", mode, enqueued.Load(), done, time.Since(t0).Round(time.Millisecond))
	}
	<-produced
	if prodErr != nil {
		t.Fatal(prodErr)
	}
	deadline := time.Now().Add(90 * time.Second)
	for countWhere(t, admin, `status = 'SUCCEEDED'`) < workerRestartJobs {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d jobs SUCCEEDED 90 s after the last enqueue; by status: %v", countWhere(t, admin, `status = 'SUCCEEDED'`),
				workerRestartJobs, testdb.Column[string](t, admin, `SELECT status || ' ' || count(*) FROM job_queue GROUP BY status`))
		}
		time.Sleep(20 * time.Millisecond) // polling the ledger, not synchronisation
	}
	if err := w.stop(); err != nil {
		t.Fatalf("Run returned %v", err)
	}

	if n := testdb.Scalar[int64](t, admin, `SELECT count(*) FROM job_queue`); n != workerRestartJobs {
		t.Errorf("%d jobs in the ledger, want the %d enqueued", n, workerRestartJobs)
	}
	if n := testdb.Scalar[int64](t, admin, `SELECT count(*) FROM job_queue WHERE id = ANY($1) AND status = 'SUCCEEDED'`, ids); n != workerRestartJobs {
		t.Errorf("%d of the %d acknowledged jobs SUCCEEDED: lost", n, workerRestartJobs)
	}
	checkNoAttemptFinishedTwice(t, admin)
	if n := testdb.Scalar[int64](t, admin, `SELECT count(*) FROM job_queue q
		WHERE (SELECT count(*) FROM rl_effects e WHERE e.job_id = q.id AND e.attempt = q.attempt) <> 1`); n != 0 {
		t.Errorf("%d jobs without exactly one side effect at the attempt that succeeded", n)
	}
	mu.Lock()
	defer mu.Unlock()
	var twice, never int
	for _, id := range ids {
		switch succeeded[id] {
		case 1:
		case 0:
			never++
		default:
			twice++
		}
	}
	if twice > 0 || never > 0 {
		t.Errorf("the worker reported %d jobs succeeded more than once and %d never (outcomes: %v)", twice, never, byOutcome)
	}
	for _, f := range lost {
		t.Logf("reported lost: job %s attempt %d (%v); the ledger: %s, events %s, side effects %s", f.Job.ID, f.Job.Attempt, f.Err,
			testdb.Scalar[string](t, admin, `SELECT status || ' at attempt ' || attempt FROM job_queue WHERE id = $1`, f.Job.ID),
			history(t, admin, f.Job.ID), effects(t, admin, f.Job.ID))
	}
	warnings, nWarn := logs.counts()
	if nWarn == 0 {
		t.Error("the worker logged no warning: the restarts did not hit it")
	}
	t.Logf("worker outcomes %v; jobs that needed more than one attempt: %d", byOutcome,
		testdb.Scalar[int64](t, admin, `SELECT count(*) FROM job_queue WHERE attempt > 1`))
	t.Logf("worker warnings: %s", warnings)
	t.Logf("producer's failed attempts (each retried with the same job id): %v", prodErrors)
}
