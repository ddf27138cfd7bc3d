package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/runledger-go/runledger/bench/internal/bench"
	"github.com/runledger-go/runledger/internal/testdb/roundtrip"
)

// jobArgs is the River job the comparison inserts and retries: a payload
// of the size of the bench's replay jobs.
type jobArgs struct {
	To       string `json:"to"`
	Template string `json:"template"`
	N        int64  `json:"n"`
}

func (jobArgs) Kind() string { return "runledger_bench" }

func argsFor(n int64) jobArgs {
	return jobArgs{To: fmt.Sprintf("user%d@example.com", n), Template: "receipt", N: n}
}

// riverAnchor runs River's counterparts of two replay paths:
// Client.Insert of one job (bench.Inserted) and Client.JobRetry of a job
// already waiting in the queue (bench.Existing), through an insert-only
// River client (no queues, no workers: nothing fetches or works the jobs
// during a run).
type riverAnchor struct {
	mu sync.Mutex
	// ids holds, per database, the River job id of seeded source n at
	// index n-1.
	ids map[string][]int64
}

func newRiverAnchor() *riverAnchor { return &riverAnchor{ids: map[string][]int64{}} }

func (a *riverAnchor) Name() string { return "river" }

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// Prepare migrates River's tables into the database with rivermigrate and
// inserts one River job per seeded source, scheduled five minutes ago:
// jobs waiting in the queue, which JobRetry locks and returns unchanged
// (its idempotent case, as the replay's existing path returns the replay
// made before).
func (a *riverAnchor) Prepare(ctx context.Context, dbURL string, sources int) error {
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		return err
	}
	defer pool.Close()
	driver := riverpgxv5.New(pool)
	migrator, err := rivermigrate.New(driver, &rivermigrate.Config{Logger: quiet})
	if err != nil {
		return err
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return fmt.Errorf("rivermigrate: %w", err)
	}
	if _, err := pool.Exec(ctx, `TRUNCATE river_job`); err != nil {
		return err
	}
	client, err := river.NewClient(driver, &river.Config{Logger: quiet})
	if err != nil {
		return err
	}
	ids := make([]int64, 0, sources)
	scheduled := time.Now().Add(-5 * time.Minute)
	const chunk = 1000
	for first := 1; first <= sources; first += chunk {
		var params []river.InsertManyParams
		for n := first; n < first+chunk && n <= sources; n++ {
			params = append(params, river.InsertManyParams{Args: argsFor(int64(n)), InsertOpts: &river.InsertOpts{ScheduledAt: scheduled}})
		}
		res, err := client.InsertMany(ctx, params)
		if err != nil {
			return err
		}
		for _, r := range res {
			ids = append(ids, r.Job.ID)
		}
	}
	for _, stmt := range []string{"VACUUM ANALYZE", "CHECKPOINT"} {
		if _, err := pool.Exec(ctx, stmt); err != nil {
			return fmt.Errorf("%s: %w", stmt, err)
		}
	}
	a.mu.Lock()
	a.ids[dbURL] = ids
	a.mu.Unlock()
	return nil
}

// Open readies Insert for bench.Inserted and JobRetry for bench.Existing;
// River has no counterpart of the other paths. The round trips are
// counted on the wire, on a connection of its own, after two warming
// calls.
func (a *riverAnchor) Open(ctx context.Context, dbURL string, path bench.Path, clients int) (bench.AnchorRun, error) {
	a.mu.Lock()
	ids := a.ids[dbURL]
	a.mu.Unlock()
	var r *riverRun
	switch path {
	case bench.Inserted:
		r = &riverRun{op: "Insert", do: func(ctx context.Context, c *river.Client[pgx.Tx], n int64) error {
			_, err := c.Insert(ctx, argsFor(n), nil)
			return err
		}}
	case bench.Existing:
		r = &riverRun{op: "JobRetry", do: func(ctx context.Context, c *river.Client[pgx.Tx], n int64) error {
			job, err := c.JobRetry(ctx, ids[n-1])
			if err == nil && job.State != "available" {
				err = fmt.Errorf("JobRetry: job %d is %s, want available", job.ID, job.State)
			}
			return err
		}}
	default:
		return nil, nil
	}
	trips, err := countTrips(ctx, dbURL, r.do)
	if err != nil {
		return nil, err
	}
	r.trips = trips
	cfg, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		return nil, err
	}
	cfg.MaxConns, cfg.MinConns = int32(clients), int32(clients)
	if r.pool, err = pgxpool.NewWithConfig(ctx, cfg); err != nil {
		return nil, err
	}
	// Open every connection before the clock starts.
	conns := make([]*pgxpool.Conn, clients)
	for i := range conns {
		if conns[i], err = r.pool.Acquire(ctx); err != nil {
			r.pool.Close()
			return nil, err
		}
	}
	for _, c := range conns {
		c.Release()
	}
	if r.client, err = river.NewClient(riverpgxv5.New(r.pool), &river.Config{Logger: quiet}); err != nil {
		r.pool.Close()
		return nil, err
	}
	return r, nil
}

type riverRun struct {
	op     string
	do     func(context.Context, *river.Client[pgx.Tx], int64) error
	trips  int
	pool   *pgxpool.Pool
	client *river.Client[pgx.Tx]
}

func (r *riverRun) Operation() string { return r.op }

func (r *riverRun) Do(ctx context.Context, n int64, _ string) error { return r.do(ctx, r.client, n) }

func (r *riverRun) RoundTrips() int { return r.trips }

func (r *riverRun) Close() { r.pool.Close() }

// countTrips returns the round trips of one call of do, on a one-connection
// pool whose statement cache two earlier calls warmed. A round trip is a
// write of the client's that follows a read from the server: the client
// waited for the server in between.
func countTrips(ctx context.Context, dbURL string, do func(context.Context, *river.Client[pgx.Tx], int64) error) (int, error) {
	cfg, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		return 0, err
	}
	counter := roundtrip.Pool(cfg)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return 0, err
	}
	defer pool.Close()
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{Logger: quiet})
	if err != nil {
		return 0, err
	}
	for range 2 {
		if err := do(ctx, client, 1); err != nil {
			return 0, err
		}
	}
	before := counter.Count()
	if err := do(ctx, client, 1); err != nil {
		return 0, err
	}
	return counter.Count() - before, nil
}
