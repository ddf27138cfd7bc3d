package replay_test

import (
	"bufio"
	"context"
	"database/sql"
	"flag"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib" // the database/sql driver goose migrates with

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/goose"
	"github.com/runledger-go/runledger/internal/pgserver"
	"github.com/runledger-go/runledger/internal/testdb"
	"github.com/runledger-go/runledger/replay"
)

// The bulk replay benchmark: one client on a durable throwaway server
// (fsync and synchronous_commit on), the single replay's rate measured in
// the same run beside it.
//
//	go test -run '^$' -bench BulkReplay -benchtime 1x ./replay/
//	go test -run '^$' -bench BulkReplay -benchtime 1x -timeout 30m ./replay/ -bulk.sources=1000000
//
// It seeds -bulk.sources SUCCEEDED jobs of one type and organization,
// replays -bulk.single of them one by one with SucceededJob (single/s),
// then all of them with one Bulk by filter (bulk/s, elapsed) and the same
// action again, all existing (rerun_s). peak_rss_MB is this process's
// peak resident set (VmHWM, reset before the bulk) over the bulk and the
// rerun: the client's memory, which stays bounded by the chunk size.
// count_s is what BulkCount (or BulkRequest.Count, in the first chunk)
// costs for the whole selection afterwards: one statement reading every
// selected job and probing its lineage.
var (
	bulkSources = flag.Int("bulk.sources", 10_000, "sources of the bulk replay benchmark")
	bulkSingles = flag.Int("bulk.single", 2_000, "single replays measured beside the bulk replay benchmark")
	bulkChunk   = flag.Int("bulk.chunk", replay.DefaultBulkChunk, "chunk size of the bulk replay benchmark")
)

func BenchmarkBulkReplay(b *testing.B) {
	ctx := context.Background()
	srv, err := pgserver.Start(ctx, pgserver.Options{Durable: true, Logf: b.Logf})
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Stop() //nolint:errcheck
	url := srv.URL("")
	sqldb, err := sql.Open("pgx", url)
	if err != nil {
		b.Fatal(err)
	}
	if err := goose.Up(ctx, sqldb); err != nil {
		b.Fatal(err)
	}
	_ = sqldb.Close()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		b.Fatal(err)
	}
	cfg.MaxConns = 2
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer pool.Close()

	n := *bulkSources
	org := runledger.Organization(uuid.MustParse("6a3c3a4e-0000-4000-8000-000000000001"))
	t0 := time.Now()
	for _, stmt := range []string{
		`INSERT INTO job_definitions (job_type) VALUES ('invoice.send')`,
		// UUIDv7-shaped ids in creation order (a millisecond apart).
		`INSERT INTO job_queue (id, job_type, organization_id, payload, status, run_number, attempt, max_attempts,
		     stage, started_at, finished_at, created_at)
		 SELECT (lpad(to_hex(ms), 12, '0') || '7' || substr(h, 1, 3) || '8' || substr(h, 4, 15))::uuid,
		        'invoice.send', $1, jsonb_build_object('invoice', g), 'SUCCEEDED', 1, 1, 5, 'completed',
		        to_timestamp(ms / 1000.0) - interval '1 second', to_timestamp(ms / 1000.0), to_timestamp(ms / 1000.0) - interval '2 seconds'
		 FROM generate_series(1, $2::int) g,
		      LATERAL (SELECT (extract(epoch FROM now() - interval '1 day') * 1000)::bigint + g AS ms, md5(g::text) AS h) x`,
		`VACUUM ANALYZE`,
		`CHECKPOINT`,
	} {
		var args []any
		if strings.Contains(stmt, "$1") {
			args = []any{testdb.Tenant(org), n}
		}
		if _, err := pool.Exec(ctx, stmt, args...); err != nil {
			b.Fatalf("seed: %v", err)
		}
	}
	b.Logf("seeded %d sources in %s", n, time.Since(t0).Round(time.Millisecond))

	// The single replay, one by one, on the first sources.
	singles := min(*bulkSingles, n)
	ids := make([]replay.Source, 0, singles)
	rows, err := pool.Query(ctx, `SELECT id FROM job_queue ORDER BY id LIMIT $1`, singles)
	if err != nil {
		b.Fatal(err)
	}
	for rows.Next() {
		var s replay.Source
		if err := rows.Scan(&s.JobID); err != nil {
			b.Fatal(err)
		}
		s.ExpectedRunNumber = 1
		ids = append(ids, s)
	}
	if rows.Err() != nil {
		b.Fatal(rows.Err())
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t1 := time.Now()
		for _, s := range ids {
			if _, err := replay.SucceededJob(ctx, pool, replay.Request{Scope: org, SourceJobID: s.JobID, ExpectedRunNumber: 1,
				Key: "single-" + strconv.Itoa(i), Reason: "bench"}); err != nil {
				b.Fatal(err)
			}
		}
		single := float64(singles) / time.Since(t1).Seconds()

		req := replay.BulkRequest{Scope: org, Key: "bulk-" + strconv.Itoa(i), Reason: "bench",
			Filter: &replay.Filter{JobType: "invoice.send"}, ChunkSize: *bulkChunk}
		resetPeakRSS(b)
		t2 := time.Now()
		sum, err := replay.Bulk(ctx, pool, req, nil)
		if err != nil || sum.Inserted != n {
			b.Fatalf("bulk: %+v, %v", sum, err)
		}
		elapsed := time.Since(t2)
		t3 := time.Now()
		sum, err = replay.Bulk(ctx, pool, req, nil)
		if err != nil || sum.Existing != n {
			b.Fatalf("rerun: %+v, %v", sum, err)
		}
		rerun := time.Since(t3)
		rss := peakRSSMB(b)
		t4 := time.Now()
		if counted, err := replay.BulkCount(ctx, pool, req); err != nil || counted != n {
			b.Fatalf("count: %d, %v", counted, err)
		}
		count := time.Since(t4)
		bulk := float64(n) / elapsed.Seconds()
		b.ReportMetric(single, "single/s")
		b.ReportMetric(bulk, "bulk/s")
		b.ReportMetric(bulk/single, "x_single")
		b.ReportMetric(elapsed.Seconds(), "elapsed_s")
		b.ReportMetric(rerun.Seconds(), "rerun_s")
		b.ReportMetric(rss, "peak_rss_MB")
		b.ReportMetric(count.Seconds(), "count_s")
		b.Logf("%d sources, chunk %d: single %.0f/s (%d); bulk %.0f/s (%.1fx) in %s; rerun (all existing) %s; peak RSS %.1f MB; count %s",
			n, *bulkChunk, single, singles, bulk, bulk/single, elapsed.Round(time.Millisecond), rerun.Round(time.Millisecond), rss, count.Round(time.Millisecond))
	}
}

// resetPeakRSS resets this process's VmHWM (Linux 4.0 and later).
func resetPeakRSS(b *testing.B) {
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		b.Logf("peak RSS not reset: %v", err)
	}
}

// peakRSSMB reads VmHWM from /proc/self/status, in MiB.
func peakRSSMB(b *testing.B) float64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		b.Logf("peak RSS: %v", err)
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			return kb / 1024
		}
	}
	return 0
}
