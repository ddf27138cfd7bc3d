package metrics_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/internal/testdb"
	"github.com/runledger-go/runledger/jobs"
	"github.com/runledger-go/runledger/metrics"
	"github.com/runledger-go/runledger/worker"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// statsCounter counts the Stats statements a pool sends.
type statsCounter struct{ n atomic.Int64 }

func (c *statsCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if strings.Contains(d.SQL, "-- name: JobStats") {
		c.n.Add(1)
	}
	return ctx
}

func (c *statsCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// TestStatsCachedPerInterval: however many scrapes come within the
// interval, the database sees one Stats statement; the gauges hold the
// live counts.
func TestStatsCachedPerInterval(t *testing.T) {
	t.Parallel()
	ctx := testdb.Context(t)
	cfg, err := pgxpool.ParseConfig(testdb.NewURL(t))
	if err != nil {
		t.Fatal(err)
	}
	counter := &statsCounter{}
	cfg.ConnConfig.Tracer = counter
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	testdb.Define(t, ctx, pool, jobs.DefinitionInput{JobType: "email"})
	for range 3 {
		testdb.Enqueue(t, ctx, pool, jobs.EnqueueRequest{Scope: runledger.Global(), JobType: "email"})
	}

	c := metrics.NewStatsCollector(pool, metrics.StatsOptions{Interval: time.Hour})
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	for range 10 {
		n, err := testutil.GatherAndCount(reg, "runledger_jobs")
		if err != nil {
			t.Fatal(err)
		}
		if n != 3 {
			t.Fatalf("runledger_jobs has %d series, want 3 (one type, three statuses)", n)
		}
	}
	if got := counter.n.Load(); got != 1 {
		t.Fatalf("10 scrapes sent %d Stats statements, want 1", got)
	}
	want := `
# HELP runledger_jobs Live jobs by type and status (pending_due, pending_scheduled, leased), exact at the last Stats read.
# TYPE runledger_jobs gauge
runledger_jobs{status="leased",type="email"} 0
runledger_jobs{status="pending_due",type="email"} 3
runledger_jobs{status="pending_scheduled",type="email"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "runledger_jobs"); err != nil {
		t.Fatal(err)
	}
	if got := counter.n.Load(); got != 1 {
		t.Fatalf("11 scrapes sent %d Stats statements, want 1", got)
	}
}

// TestWorkerCollector: each finished attempt counts by type and outcome.
func TestWorkerCollector(t *testing.T) {
	t.Parallel()
	w := metrics.NewWorkerCollector()
	now := time.Now()
	started := now.Add(2 * time.Second)
	w.OnFinished(worker.Finished{Job: runledger.Job{JobType: "email", NextRunAt: now, StartedAt: &started},
		Outcome: worker.OutcomeSucceeded, Duration: time.Second})
	w.OnFinished(worker.Finished{Job: runledger.Job{JobType: "email"}, Outcome: worker.OutcomeRetried, Duration: time.Second})
	want := `
# HELP runledger_jobs_finished_total Attempts a worker in this process finished, by job type and outcome (succeeded, retried, dead_lettered, lost).
# TYPE runledger_jobs_finished_total counter
runledger_jobs_finished_total{outcome="retried",type="email"} 1
runledger_jobs_finished_total{outcome="succeeded",type="email"} 1
`
	if err := testutil.CollectAndCompare(w, strings.NewReader(want), "runledger_jobs_finished_total"); err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(w, "runledger_job_pickup_seconds"); n != 1 {
		t.Fatalf("%d pickup series, want 1", n)
	}
}
