package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/runledger-go/runledger/jobs"
	"github.com/runledger-go/runledger/worker"
)

// WorkerJobType is the job type of the worker bench's trivial jobs.
const WorkerJobType = "runledger-bench-trivial"

// RunledgerWorkers is this project's worker runtime (package worker) as a
// WorkerSystem.
func RunledgerWorkers() WorkerSystem { return runledgerWorkers{} }

type runledgerWorkers struct{}

func (runledgerWorkers) Name() string { return "runledger" }

// workerConfig maps a bench configuration to worker.Config.
func workerConfig(config string) worker.Config {
	switch config {
	case WorkerTuned:
		return worker.Config{Concurrency: 1000, PollInterval: 50 * time.Millisecond}
	case WorkerHeartbeat:
		// Every handler holds its job; a 1.5 s lease, so heartbeats every
		// 500 ms; no recovery and no scheduler (their statements would be
		// counted).
		return worker.Config{Concurrency: 1000, PollInterval: 50 * time.Millisecond, Lease: 1500 * time.Millisecond,
			RecoveryInterval: -1, DisableSchedules: true}
	default:
		return worker.Config{Concurrency: 50}
	}
}

func (runledgerWorkers) Describe(config string) string {
	c := workerConfig(config)
	switch config {
	case WorkerHeartbeat:
		return fmt.Sprintf("worker.Config{Concurrency: the jobs held, PollInterval: %s, Lease: %s, RecoveryInterval: -1, DisableSchedules: true}; heartbeats every %s", c.PollInterval, c.Lease, c.Lease/3)
	case WorkerTuned:
		return fmt.Sprintf("worker.Config{Concurrency: %d, PollInterval: %s}; lease 30s, heartbeats every 10s, LISTEN/NOTIFY wake-ups, recovery every 10s (defaults)", c.Concurrency, c.PollInterval)
	}
	return fmt.Sprintf("worker.Config{Concurrency: %d}; poll 1s, lease 30s, heartbeats every 10s, LISTEN/NOTIFY wake-ups, recovery every 10s (defaults)", c.Concurrency)
}

func (runledgerWorkers) Prepare(ctx context.Context, dbURL string) error {
	cfg, err := pgx.ParseConfig(dbURL)
	if err != nil {
		return err
	}
	sqlDB := stdlib.OpenDB(*cfg)
	err = migrate(ctx, sqlDB)
	_ = sqlDB.Close()
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		return err
	}
	defer pool.Close()
	for _, f := range helperFunctions {
		if _, err := pool.Exec(ctx, f); err != nil {
			return err
		}
	}
	_, err = jobs.UpsertDefinition(ctx, pool, jobs.DefinitionInput{JobType: WorkerJobType})
	return err
}

func (runledgerWorkers) Reset(ctx context.Context, dbURL string) error {
	return execOn(ctx, dbURL, `TRUNCATE job_events, job_queue CASCADE`)
}

// Insert enqueues n jobs through jobs.EnqueueMany, in batches of
// jobs.MaxEnqueueMany, as an application fanning out work does: each job
// with its ENQUEUED event, one statement per batch.
func (runledgerWorkers) Insert(ctx context.Context, pool *pgxpool.Pool, n int) error {
	maxAttempts := int32(3)
	for done := 0; done < n; {
		reqs := make([]jobs.EnqueueRequest, min(n-done, jobs.MaxEnqueueMany))
		for i := range reqs {
			reqs[i] = jobs.EnqueueRequest{JobType: WorkerJobType, MaxAttempts: &maxAttempts,
				Payload: json.RawMessage(`{"n":` + strconv.Itoa(done+i+1) + `}`)}
		}
		results, err := jobs.EnqueueMany(ctx, pool, reqs)
		if err != nil {
			return err
		}
		for _, r := range results {
			if r.Err != nil {
				return r.Err
			}
		}
		done += len(reqs)
	}
	return nil
}

type trivialPayload struct {
	N int64 `json:"n"`
}

func (runledgerWorkers) Start(ctx context.Context, pool *pgxpool.Pool, config string, h WorkerHooks) (WorkerRun, error) {
	cfg := workerConfig(config)
	if h.Workers > 0 {
		cfg.Concurrency = h.Workers
	}
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg.OnFinished = func(f worker.Finished) {
		if f.Outcome == worker.OutcomeSucceeded {
			h.Completed()
		}
	}
	w, err := worker.New(pool, cfg)
	if err != nil {
		return nil, err
	}
	hold := h.Hold
	if err := worker.Register(w, WorkerJobType, func(ctx context.Context, j worker.Job[trivialPayload]) (any, error) {
		h.Started(j.Payload.N)
		if hold != nil {
			<-hold
		}
		return nil, nil
	}); err != nil {
		return nil, err
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan error, 1)
	go func() { done <- w.Run(runCtx) }()
	return &runledgerRun{pool: pool, cancel: cancel, done: done, interval: cfgInterval(cfg)}, nil
}

func cfgInterval(c worker.Config) time.Duration {
	if c.HeartbeatInterval > 0 {
		return c.HeartbeatInterval
	}
	if c.Lease > 0 {
		return c.Lease / 3
	}
	return worker.DefaultLease / 3
}

type runledgerRun struct {
	pool     *pgxpool.Pool
	cancel   context.CancelFunc
	done     chan error
	interval time.Duration
}

func (r *runledgerRun) Enqueue(ctx context.Context, n int64) error {
	_, err := jobs.Enqueue(ctx, r.pool, jobs.EnqueueRequest{JobType: WorkerJobType, Payload: json.RawMessage(fmt.Sprintf(`{"n":%d}`, n))})
	return err
}

func (r *runledgerRun) HeartbeatInterval() time.Duration { return r.interval }

func (r *runledgerRun) Stop() error {
	r.cancel()
	return <-r.done
}

// execOn runs one statement on a connection of its own.
func execOn(ctx context.Context, dbURL, sql string, args ...any) error {
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, sql, args...)
	return err
}
