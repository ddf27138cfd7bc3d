package worker_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/runledger-go/runledger/health"
	"github.com/runledger-go/runledger/internal/testdb"
	"github.com/runledger-go/runledger/worker"
)

// With a Retention the worker prunes, at start and on its interval, the
// jobs that finished longer ago, and keeps the rest; without one it never
// prunes (the default).
func TestWorkerPrunesOnASchedule(t *testing.T) {
	t.Parallel()
	pruned := make(chan health.PruneResult, 4)
	h := newHarness(t, worker.Config{Retention: 24 * time.Hour, RetentionInterval: time.Hour, RecoveryInterval: -1,
		OnPruned: func(r health.PruneResult) { pruned <- r }})
	h.define("old", 3)
	if err := worker.Register(h.w, "old", func(ctx context.Context, _ worker.Job[json.RawMessage]) (any, error) { return nil, nil }); err != nil {
		t.Fatal(err)
	}
	testdb.Exec(t, h.pool, `INSERT INTO job_queue (job_type, status, max_attempts, attempt, stage, started_at, finished_at)
		SELECT 'old', 'SUCCEEDED', 3, 1, 'completed', now() - interval '3 days', now() - make_interval(hours => n * 20)
		FROM generate_series(0, 3) n`)
	h.start()
	select {
	case r := <-pruned:
		if r.DeletedJobs != 2 {
			t.Fatalf("the scheduled prune: %+v, want the 2 jobs over a day old deleted", r)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no scheduled prune")
	}
	if n := testdb.Count(t, h.pool, "job_queue"); n != 2 {
		t.Fatalf("%d jobs left, want 2", n)
	}
}

// Config refuses a negative retention, interval or batch.
func TestWorkerRetentionConfig(t *testing.T) {
	t.Parallel()
	pool := testdb.ClosedPool(t)
	for _, cfg := range []worker.Config{
		{Retention: -time.Hour},
		{Retention: time.Hour, RetentionInterval: -time.Second},
		{Retention: time.Hour, RetentionBatch: health.MaxPruneBatch + 1},
	} {
		if _, err := worker.New(pool, cfg); err == nil {
			t.Errorf("config %+v accepted", cfg)
		}
	}
}
