package worker_test

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	"github.com/runledger-go/runledger/internal/testdb"
	"github.com/runledger-go/runledger/jobs"
	"github.com/runledger-go/runledger/worker"
)

// BenchmarkWorkerThroughput runs b.N trivial jobs, inserted beforehand in
// one statement, with a worker of 1,000 handlers, and reports jobs/s. The
// test kit's server runs with fsync off: the durable figures beside River
// come from the bench module (see docs/PERFORMANCE.md).
func BenchmarkWorkerThroughput(b *testing.B) {
	ctx := context.Background()
	pool := testdb.OpenPool(b, testdb.NewURL(b), 16, nil)
	testdb.Define(b, ctx, pool, jobs.DefinitionInput{JobType: "trivial"})
	testdb.Exec(b, pool, `INSERT INTO job_queue (id, job_type, max_attempts, payload)
		SELECT gen_random_uuid(), 'trivial', 3, '{}' FROM generate_series(1, $1)`, b.N)
	var done atomic.Int64
	all := make(chan struct{})
	w, err := worker.New(pool, worker.Config{Concurrency: 1000, Logger: quiet, OnFinished: func(worker.Finished) {
		if done.Add(1) == int64(b.N) {
			close(all)
		}
	}})
	if err != nil {
		b.Fatal(err)
	}
	if err := worker.Register(w, "trivial", func(ctx context.Context, _ worker.Job[json.RawMessage]) (any, error) { return nil, nil }); err != nil {
		b.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	b.ResetTimer()
	start := time.Now()
	go func() { _ = w.Run(runCtx) }()
	<-all
	elapsed := time.Since(start)
	b.StopTimer()
	cancel()
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "jobs/s")
}
