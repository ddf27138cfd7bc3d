package main

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/runledger-go/runledger/bench/internal/bench"
)

// trivialArgs is the worker bench's River job: its number.
type trivialArgs struct {
	N int64 `json:"n"`
}

func (trivialArgs) Kind() string { return "runledger_bench_trivial" }

// riverWorkers is River's Client, with a queue and workers, as a
// bench.WorkerSystem.
type riverWorkers struct{}

func (riverWorkers) Name() string { return "river" }

// riverConfig maps a bench configuration to River's: the defaults are
// River's own (FetchCooldown 100 ms, FetchPollInterval 1 s) with one
// queue of 50 workers; tuned is 1,000 workers, a 1 ms fetch cooldown and
// a 50 ms poll.
func riverConfig(config string, workers int) (maxWorkers int, cooldown, poll time.Duration) {
	switch config {
	case bench.WorkerTuned, bench.WorkerHeartbeat:
		maxWorkers, cooldown, poll = 1000, time.Millisecond, 50*time.Millisecond
	default:
		maxWorkers = 50
	}
	if workers > 0 {
		maxWorkers = workers
	}
	return maxWorkers, cooldown, poll
}

func (riverWorkers) Describe(config string) string {
	w, cooldown, poll := riverConfig(config, 0)
	switch config {
	case bench.WorkerTuned:
		return fmt.Sprintf("river.Config{Queues: {default: {MaxWorkers: %d}}, FetchCooldown: %s, FetchPollInterval: %s}; the rest at River's defaults", w, cooldown, poll)
	case bench.WorkerHeartbeat:
		return "the tuned configuration with MaxWorkers the jobs held (River has no heartbeat: its jobs run under a timeout, and a rescuer takes back jobs stuck for an hour)"
	}
	return fmt.Sprintf("river.Config{Queues: {default: {MaxWorkers: %d}}}; FetchCooldown %s, FetchPollInterval %s (River's defaults)", w, river.FetchCooldownDefault, river.FetchPollIntervalDefault)
}

// Prepare migrates River's tables with rivermigrate.
func (riverWorkers) Prepare(ctx context.Context, dbURL string) error {
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		return err
	}
	defer pool.Close()
	migrator, err := rivermigrate.New(riverpgxv5.New(pool), &rivermigrate.Config{Logger: quiet})
	if err != nil {
		return err
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return fmt.Errorf("rivermigrate: %w", err)
	}
	return nil
}

func (riverWorkers) Reset(ctx context.Context, dbURL string) error {
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, `TRUNCATE river_job`)
	return err
}

// Insert inserts n jobs with Client.InsertManyFast, one batch, through an
// insert-only client on pool.
func (riverWorkers) Insert(ctx context.Context, pool *pgxpool.Pool, n int) error {
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{Logger: quiet})
	if err != nil {
		return err
	}
	params := make([]river.InsertManyParams, n)
	for i := range params {
		params[i] = river.InsertManyParams{Args: trivialArgs{N: int64(i + 1)}}
	}
	got, err := client.InsertManyFast(ctx, params)
	if err == nil && got != n {
		err = fmt.Errorf("InsertManyFast inserted %d of %d jobs", got, n)
	}
	return err
}

func (riverWorkers) Start(ctx context.Context, pool *pgxpool.Pool, config string, h bench.WorkerHooks) (bench.WorkerRun, error) {
	maxWorkers, cooldown, poll := riverConfig(config, h.Workers)
	workers := river.NewWorkers()
	hold := h.Hold
	river.AddWorker(workers, river.WorkFunc(func(ctx context.Context, j *river.Job[trivialArgs]) error {
		h.Started(j.Args.N)
		if hold != nil {
			<-hold
		}
		return nil
	}))
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Logger:            quiet,
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: maxWorkers}},
		Workers:           workers,
		FetchCooldown:     cooldown,
		FetchPollInterval: poll,
	})
	if err != nil {
		return nil, err
	}
	// Completions are reported after the completer's batch is written.
	events, cancelSub := client.SubscribeConfig(&river.SubscribeConfig{Kinds: []river.EventKind{river.EventKindJobCompleted}, ChanSize: 1 << 20})
	subDone := make(chan struct{})
	go func() {
		defer close(subDone)
		for range events {
			h.Completed()
		}
	}()
	runCtx := context.WithoutCancel(ctx)
	if err := client.Start(runCtx); err != nil {
		cancelSub()
		return nil, err
	}
	return &riverWorkerRun{client: client, cancelSub: cancelSub, subDone: subDone}, nil
}

type riverWorkerRun struct {
	client    *river.Client[pgx.Tx]
	cancelSub func()
	subDone   chan struct{}
}

func (r *riverWorkerRun) Enqueue(ctx context.Context, n int64) error {
	_, err := r.client.Insert(ctx, trivialArgs{N: n}, nil)
	return err
}

// HeartbeatInterval is 0: River's workers send no heartbeat.
func (r *riverWorkerRun) HeartbeatInterval() time.Duration { return 0 }

func (r *riverWorkerRun) Stop() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := r.client.Stop(ctx)
	r.cancelSub()
	return err
}
