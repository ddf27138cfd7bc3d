package health_test

import (
	"context"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/health"
	"github.com/runledger-go/runledger/internal/testdb"
	"github.com/runledger-go/runledger/lease"
)

// benchSize reads a size from the environment, else def.
func benchSize(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}

// seedFinished inserts n jobs, from..from+n-1, with ids in insertion
// order (as UUIDv7 ids are), that finished hours to
// weeks ago across 10 tenants and 10 types, in set-based statements of
// 250,000 jobs, or 50,000 when they carry events (each well within the
// test kit's one-minute statement timeout on a loaded machine: 200,000 jobs
// with 1,000,000 events in one statement took 51 to 56 s here), with
// events events each.
func seedFinished(b *testing.B, pool *pgxpool.Pool, from, n, events int) {
	b.Helper()
	chunk := 250_000
	if events > 0 {
		chunk = 50_000
	}
	for lo := from; lo < from+n; lo += chunk {
		hi := min(lo+chunk, from+n) - 1
		start := time.Now()
		testdb.Exec(b, pool, `WITH ins AS (
			    INSERT INTO job_queue (id, job_type, organization_id, status, max_attempts, attempt, stage, payload,
			        started_at, finished_at, created_at)
			    SELECT ('00000001-0000-7000-8000-' || lpad(to_hex(g), 12, '0'))::uuid, 'type-' || (g % 10),
			           ('00000000-0000-4000-8000-00000000000' || (g % 10))::uuid,
			           (ARRAY['SUCCEEDED','SUCCEEDED','SUCCEEDED','DEAD_LETTERED','CANCELED']::job_status[])[1 + g % 5], 3, 1, 'completed',
			           '{"n":1}', now() - interval '2 hours' - make_interval(secs => g % 2000000) - interval '3 seconds',
			           now() - interval '2 hours' - make_interval(secs => g % 2000000), now() - interval '3 hours' - make_interval(secs => g % 2000000)
			    FROM generate_series($1::int, $2::int) g
			    RETURNING organization_id, id, finished_at)
			INSERT INTO job_events (organization_id, job_id, run_number, attempt, event_type, payload, occurred_at)
			SELECT ins.organization_id, ins.id, 1, 1, 'PROGRESS', '{}', ins.finished_at
			FROM ins CROSS JOIN generate_series(1, $3::int)`, lo, hi, events)
		b.Logf("seeded finished jobs %d..%d in %s", lo, hi, time.Since(start).Round(time.Second))
	}
}

// BenchmarkStats measures GetStats over every tenant and over one tenant
// on two databases of the same server with the same live queue (100,000
// jobs: due, scheduled, leased) and the same window (10,000 jobs that
// finished in the last hour): one with nothing else (110,000 jobs), one
// with RUNLEDGER_BENCH_HISTORY (default 9,890,000) finished jobs older
// than the window besides (10,000,000 jobs). Each round calls both, in
// turn, so the machine's load falls on both alike. Reports the p50 and
// p95 of one call in ms per database and scope, and the ratio of the p50s
// (large/small).
//
//	go test -run '^$' -bench BenchmarkStats -benchtime 200x -timeout 2h ./health/
func BenchmarkStats(b *testing.B) {
	history := benchSize("RUNLEDGER_BENCH_HISTORY", 9_890_000)
	ctx := context.Background()
	small := testdb.OpenPool(b, testdb.NewURL(b), 2, nil)
	large := testdb.OpenPool(b, testdb.NewURL(b), 2, nil)
	for _, pool := range []*pgxpool.Pool{small, large} {
		for _, stmt := range []string{
			`INSERT INTO job_definitions (job_type) SELECT 'type-' || n FROM generate_series(0, 9) n`,
			`INSERT INTO job_queue (id, job_type, organization_id, status, max_attempts, attempt, next_run_at, lease_expires_at, worker_id, stage, payload)
			 SELECT gen_random_uuid(), 'type-' || (g % 10), ('00000000-0000-4000-8000-00000000000' || (g % 10))::uuid,
			        (ARRAY['PENDING','PENDING','PENDING','LEASED']::job_status[])[1 + g % 4], 3, CASE WHEN g % 4 = 3 THEN 1 ELSE 0 END,
			        now() + make_interval(secs => (g % 7200) - 3600),
			        CASE WHEN g % 4 = 3 THEN now() + make_interval(secs => (g % 600) - 60) END,
			        CASE WHEN g % 4 = 3 THEN 'w' END, 'queued', '{"n":1}'
			 FROM generate_series(1, 100000) g`,
		} {
			testdb.Exec(b, pool, stmt)
		}
	}
	seedFinished(b, large, 1, history, 0)
	// The window last, so that it is as fresh on both.
	for _, pool := range []*pgxpool.Pool{small, large} {
		testdb.Exec(b, pool, `INSERT INTO job_queue (id, job_type, organization_id, status, max_attempts, attempt, stage, payload, started_at, finished_at)
			SELECT gen_random_uuid(), 'type-' || (g % 10), ('00000000-0000-4000-8000-00000000000' || (g % 10))::uuid,
			       (ARRAY['SUCCEEDED','SUCCEEDED','DEAD_LETTERED','CANCELED']::job_status[])[1 + g % 4], 3, 1, 'completed', '{}',
			       now() - make_interval(secs => g * 0.3) - interval '2 seconds', now() - make_interval(secs => g * 0.3)
			FROM generate_series(1, 10000) g`)
		testdb.Exec(b, pool, `VACUUM ANALYZE`)
	}
	b.Logf("jobs: %d and %d", testdb.Count(b, small, "job_queue"), testdb.Count(b, large, "job_queue"))
	org := runledger.Organization(uuid.UUID(orgOf(3)))
	type run struct {
		name string
		pool *pgxpool.Pool
		req  health.StatsRequest
		took []time.Duration
	}
	runs := []*run{
		{name: "small_all_", pool: small}, {name: "large_all_", pool: large},
		{name: "small_tenant_", pool: small, req: health.StatsRequest{Scope: &org}},
		{name: "large_tenant_", pool: large, req: health.StatsRequest{Scope: &org}},
	}
	call := func(r *run) time.Duration {
		start := time.Now()
		if _, err := health.GetStats(ctx, r.pool, r.req); err != nil {
			b.Fatal(err)
		}
		return time.Since(start)
	}
	// The measured loop is a sub-benchmark, so that the seeding above runs
	// once.
	b.Run("rounds", func(b *testing.B) {
		for _, r := range runs {
			r.took = r.took[:0]
		}
		for range 5 { // warm the caches, as a dashboard polling the stats does
			for _, r := range runs {
				call(r)
			}
		}
		b.ResetTimer()
		for range b.N {
			for _, r := range runs {
				r.took = append(r.took, call(r))
			}
		}
		b.StopTimer()
		for _, r := range runs {
			reportLatency(b, r.took, r.name)
		}
		for _, scope := range []string{"all", "tenant"} {
			var p50 [2]float64
			for i, size := range []string{"small", "large"} {
				for _, r := range runs {
					if r.name == size+"_"+scope+"_" {
						p50[i] = percentile(r.took, 0.5)
					}
				}
			}
			b.ReportMetric(p50[1]/p50[0], scope+"_p50_ratio")
		}
	})
}

// percentile returns the p-th percentile of took in ms (took is sorted in
// place).
func percentile(took []time.Duration, p float64) float64 {
	slices.Sort(took)
	return float64(took[min(len(took)-1, int(p*float64(len(took))))].Microseconds()) / 1000
}

// reportLatency reports the p50 and p95 of took in ms, with a prefix.
func reportLatency(b *testing.B, took []time.Duration, prefix string) {
	if len(took) == 0 {
		return
	}
	b.ReportMetric(percentile(took, 0.50), prefix+"p50_ms")
	b.ReportMetric(percentile(took, 0.95), prefix+"p95_ms")
}

// BenchmarkPruneBesideAWorker seeds RUNLEDGER_BENCH_PRUNE (default
// 200,000) finished jobs with 5 events each and 100,000 pending jobs, then
// runs a worker loop (claim 10, complete them) for RUNLEDGER_BENCH_QUIET
// seconds (default 5) alone, then beside a prune of every old job (batch
// RUNLEDGER_BENCH_BATCH, default 1000). It reports the prune's jobs/s and
// the claim's p50 and p95 in ms alone (quiet_) and during the prune
// (pruning_).
//
//	go test -run '^$' -bench BenchmarkPruneBesideAWorker -benchtime 1x -timeout 1h ./health/
func BenchmarkPruneBesideAWorker(b *testing.B) {
	n := benchSize("RUNLEDGER_BENCH_PRUNE", 200_000)
	quiet := time.Duration(benchSize("RUNLEDGER_BENCH_QUIET", 5)) * time.Second
	batch := benchSize("RUNLEDGER_BENCH_BATCH", health.DefaultPruneBatch)
	ctx := context.Background()
	pool := testdb.OpenPool(b, testdb.NewURL(b), 8, nil)
	testdb.Exec(b, pool, `INSERT INTO job_definitions (job_type) SELECT 'type-' || n FROM generate_series(0, 9) n`)
	seedFinished(b, pool, 1, n, 5)
	testdb.Exec(b, pool, `INSERT INTO job_queue (id, job_type, organization_id, max_attempts, payload)
		SELECT gen_random_uuid(), 'type-' || (g % 10), '00000000-0000-0000-0000-000000000000', 3, '{}' FROM generate_series(1, 100000) g`)
	testdb.Exec(b, pool, `VACUUM ANALYZE`)
	events := testdb.Scalar[int64](b, pool, `SELECT count(*) FROM job_events`)
	b.Logf("seeded %d finished jobs with %d events", n, events)

	// work claims and completes until stop closes, timing each claim.
	work := func(stop <-chan struct{}) []time.Duration {
		var took []time.Duration
		for {
			select {
			case <-stop:
				return took
			default:
			}
			start := time.Now()
			claimed, err := lease.Claim(ctx, pool, lease.ClaimRequest{WorkerID: "bench", Limit: 10, Lease: time.Minute})
			took = append(took, time.Since(start))
			if err != nil {
				b.Error(err)
				return took
			}
			for _, j := range claimed {
				if _, err := lease.Complete(ctx, pool, lease.CompleteRequest{Scope: testdb.Ptr(j.Scope()), JobID: j.ID, RunNumber: j.RunNumber,
					Attempt: j.Attempt, WorkerID: "bench"}); err != nil {
					b.Error(err)
					return took
				}
			}
		}
	}
	for range b.N {
		stop := make(chan struct{})
		go func() { time.Sleep(quiet); close(stop) }()
		alone := work(stop)

		stop = make(chan struct{})
		var wg sync.WaitGroup
		var during []time.Duration
		wg.Add(1)
		go func() { defer wg.Done(); during = work(stop) }()
		b.ResetTimer()
		start := time.Now()
		res, err := health.Prune(ctx, pool, health.PruneRequest{FinishedBefore: time.Now().Add(-time.Hour), BatchSize: batch})
		elapsed := time.Since(start)
		b.StopTimer()
		close(stop)
		wg.Wait()
		if err != nil {
			b.Fatal(err)
		}
		if res.DeletedJobs != int64(n) {
			b.Fatalf("pruned %+v, want %d jobs", res, n)
		}
		b.Logf("pruned %d jobs and %d events in %s (%d batches); %d claims alone, %d during", res.DeletedJobs, res.DeletedEvents,
			elapsed.Round(time.Millisecond), res.Batches, len(alone), len(during))
		b.ReportMetric(float64(res.DeletedJobs)/elapsed.Seconds(), "pruned_jobs/s")
		reportLatency(b, alone, "quiet_claim_")
		reportLatency(b, during, "pruning_claim_")
	}
}

// orgOf is the organization id 00000000-0000-4000-8000-00000000000n.
func orgOf(n int) [16]byte {
	return [16]byte{15: byte(n), 6: 0x40, 8: 0x80}
}
