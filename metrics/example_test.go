package metrics_test

import (
	"bufio"
	"context"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/internal/testdb"
	"github.com/runledger-go/runledger/jobs"
	"github.com/runledger-go/runledger/metrics"
	"github.com/runledger-go/runledger/worker"
)

// Example registers the queue's gauges and the worker's counters with the
// application's registry and serves them on /metrics.
func Example() {
	ctx := context.Background()
	pool := exampleDB(ctx) // a migrated database holding two due "email" jobs
	defer pool.Close()

	reg := prometheus.NewRegistry()
	// The gauges: scrapes within one interval share one Stats statement.
	reg.MustRegister(metrics.NewStatsCollector(pool, metrics.StatsOptions{}))
	// The counters and histograms, fed by the worker after each outcome.
	wc := metrics.NewWorkerCollector()
	reg.MustRegister(wc)
	cfg := worker.Config{OnFinished: wc.OnFinished}
	_ = cfg // then worker.New(pool, cfg), worker.Register the handlers, and Run

	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))

	// One scrape, as Prometheus would make it.
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	sc := bufio.NewScanner(rec.Body)
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "runledger_jobs{") {
			fmt.Println(sc.Text())
		}
	}
	// Output:
	// runledger_jobs{status="leased",type="email"} 0
	// runledger_jobs{status="pending_due",type="email"} 2
	// runledger_jobs{status="pending_scheduled",type="email"} 0
}

// exampleDB gives the example a fresh migrated database with two due
// jobs of type "email" (in an application: pgxpool.New with your
// database URL).
func exampleDB(ctx context.Context) *pgxpool.Pool {
	url, err := testdb.NewURLForExample()
	if err != nil {
		log.Fatal(err)
	}
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := jobs.UpsertDefinition(ctx, pool, jobs.DefinitionInput{JobType: "email"}); err != nil {
		log.Fatal(err)
	}
	for range 2 {
		if _, err := jobs.Enqueue(ctx, pool, jobs.EnqueueRequest{Scope: runledger.Global(), JobType: "email"}); err != nil {
			log.Fatal(err)
		}
	}
	return pool
}
