package requeue_test

import (
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/internal/testdb"
	"github.com/runledger-go/runledger/requeue"
)

// BenchmarkJob requeues one dead-lettered job per iteration (a fresh one
// each time), pool-owned, on the test server (fsync off): the single
// requeue's cost beside the bulk's per-job cost in BenchmarkBulk. The
// comparison with River's JobRetry on a durable server is the river
// bench's -requeue mode (docs/PERFORMANCE.md, "Requeue").
func BenchmarkJob(b *testing.B) {
	ctx := testdb.Context(b)
	pool := testdb.New(b)
	scope := runledger.Organization(uuid.New())
	ids := seedFinished(b, pool, scope, "charge.capture", "DEAD_LETTERED", "provider.down", b.N, time.Now().Add(-time.Hour))
	testdb.Exec(b, pool, "VACUUM ANALYZE")
	b.ResetTimer()
	for i := range b.N {
		out, err := requeue.Job(ctx, pool, requeue.Request{Scope: scope, JobID: ids[i], ExpectedStatus: requeue.DeadLettered, ExpectedRunNumber: 1, Reason: "r"})
		if _, ok := out.(requeue.Requeued); err != nil || !ok {
			b.Fatalf("%T %v", out, err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
}

// BenchmarkBulk requeues b.N dead-lettered jobs in one requeue.Bulk by
// list, in chunks of 1,000.
func BenchmarkBulk(b *testing.B) {
	ctx := testdb.Context(b)
	pool := testdb.New(b)
	scope := runledger.Organization(uuid.New())
	n := max(b.N, 1000)
	ids := seedFinished(b, pool, scope, "charge.capture", "DEAD_LETTERED", "provider.down", n, time.Now().Add(-time.Hour))
	list := make([]requeue.Source, n)
	for i, id := range ids {
		list[i] = requeue.Source{JobID: id, ExpectedStatus: requeue.DeadLettered, ExpectedRunNumber: 1}
	}
	testdb.Exec(b, pool, "VACUUM ANALYZE")
	b.ResetTimer()
	sum, err := requeue.Bulk(ctx, pool, requeue.BulkRequest{Scope: scope, Reason: "r", Sources: list}, nil)
	if err != nil || sum.Requeued != n {
		b.Fatalf("%+v %v", sum, err)
	}
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "jobs/s")
}
