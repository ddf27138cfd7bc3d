package console_test

import (
	"context"
	"fmt"
	"html"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/console"
	"github.com/runledger-go/runledger/internal/testdb"
	"github.com/runledger-go/runledger/requeue"
)

// consoleBenchSize reads a seed size from the environment: the defaults are
// the sizes of the console's target (1,000,000 finished jobs and 100,000
// live ones); CI runs the benchmark with small ones so the command cannot
// rot.
func consoleBenchSize(b *testing.B, env string, def int) int {
	b.Helper()
	s := os.Getenv(env)
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 100 {
		b.Fatalf("%s=%q: want an integer of at least 100", env, s)
	}
	return n
}

// BenchmarkConsolePages measures the server time of the pages an operator
// opens most, on a ledger with a large history: the job list (first page,
// a filtered page, and a page far down the keyset), and the job page of
// finished jobs with events and lineage. Each request goes straight to the
// handler (no network), so the figure is the console's own time: its
// statements and its rendering. It reports p50 and p95 in milliseconds
// per request.
//
//	go test -run '^$' -bench ConsolePages -benchtime 200x ./console/
//
// RUNLEDGER_CONSOLE_BENCH_FINISHED and RUNLEDGER_CONSOLE_BENCH_LIVE set
// the seed (defaults 1,000,000 and 100,000). The history spreads over five
// tenants and five job types; the 200 job pages opened each have three
// events, and half of them are replays of another job.
func BenchmarkConsolePages(b *testing.B) {
	finished := consoleBenchSize(b, "RUNLEDGER_CONSOLE_BENCH_FINISHED", 1_000_000)
	live := consoleBenchSize(b, "RUNLEDGER_CONSOLE_BENCH_LIVE", 100_000)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	pool := testdb.New(b)
	seedStart := time.Now()
	sample := seedConsoleBench(b, ctx, pool, finished, live)
	b.Logf("seeded %d finished and %d live jobs in %s", finished, live, time.Since(seedStart).Round(time.Second))

	h, err := console.New(pool, console.Options{Operator: func(*http.Request) (string, bool) { return "bench", true }})
	if err != nil {
		b.Fatal(err)
	}
	get := func(b *testing.B, path string) (time.Duration, string) {
		req := httptest.NewRequest(http.MethodGet, path, nil)
		rec := httptest.NewRecorder()
		start := time.Now()
		h.ServeHTTP(rec, req)
		took := time.Since(start)
		if rec.Code != http.StatusOK {
			b.Fatalf("GET %s: %d\n%s", path, rec.Code, rec.Body.String())
		}
		return took, rec.Body.String()
	}
	// A page far down the list: follow the "next" link 20 times (1,000
	// jobs deep) and measure the page it leads to.
	next := regexp.MustCompile(`href="(/jobs\?[^"]*before=[^"]*)"`)
	deep := "/jobs?status=SUCCEEDED"
	for range 20 {
		_, body := get(b, deep)
		m := next.FindStringSubmatch(body)
		if m == nil {
			b.Fatalf("no next link on %s", deep)
		}
		deep = html.UnescapeString(m[1])
	}
	cases := []struct {
		name string
		path func(i int) string
	}{
		{"job list", func(int) string { return "/jobs" }},
		{"job list by status and type", func(int) string { return "/jobs?status=DEAD_LETTERED&type=type-3" }},
		{"job list 1000 deep", func(int) string { return deep }},
		{"job page", func(i int) string { return "/jobs/" + sample[i%len(sample)].String() }},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			took := make([]time.Duration, 0, b.N)
			for i := 0; b.Loop(); i++ {
				d, _ := get(b, c.path(i))
				took = append(took, d)
			}
			slices.Sort(took)
			ms := func(q float64) float64 {
				return float64(took[int(q*float64(len(took)-1))]) / float64(time.Millisecond)
			}
			b.ReportMetric(ms(0.50), "p50-ms")
			b.ReportMetric(ms(0.95), "p95-ms")
		})
	}
}

// seedConsoleBench writes the benchmark's ledger with set-based SQL and
// returns the ids of 200 finished jobs that have events (half of them
// replays of another finished job, with their lineage rows).
func seedConsoleBench(b *testing.B, ctx context.Context, pool *pgxpool.Pool, finished, live int) []uuid.UUID {
	b.Helper()
	org := func(expr string) string {
		return fmt.Sprintf("('00000000-0000-4000-8000-00000000000' || (%s %% 5))::uuid", expr)
	}
	for _, stmt := range []string{
		`INSERT INTO job_definitions (job_type) SELECT 'type-' || n FROM generate_series(0, 4) n`,
		fmt.Sprintf(`INSERT INTO job_queue (job_type, organization_id, status, max_attempts, attempt, stage, started_at, finished_at, created_at, last_error_code)
			SELECT 'type-' || (n %% 5), %s,
			       (ARRAY['SUCCEEDED','SUCCEEDED','DEAD_LETTERED','CANCELED']::job_status[])[1 + n %% 4], 3, 1, 'completed',
			       now() - make_interval(secs => n) - interval '1 second', now() - make_interval(secs => n),
			       now() - make_interval(secs => n) - interval '2 seconds',
			       CASE WHEN n %% 4 = 2 THEN 'smtp.down' END
			FROM generate_series(1, %d) n`, org("n"), finished),
		fmt.Sprintf(`INSERT INTO job_queue (job_type, organization_id, status, max_attempts, attempt, next_run_at, lease_expires_at, worker_id, stage)
			SELECT 'type-' || (n %% 5), %s,
			       (ARRAY['PENDING','PENDING','LEASED']::job_status[])[1 + n %% 3], 3, CASE WHEN n %% 3 = 2 THEN 1 ELSE 0 END,
			       now() + make_interval(secs => n - %d),
			       CASE WHEN n %% 3 = 2 THEN now() + interval '1 hour' END,
			       CASE WHEN n %% 3 = 2 THEN 'w' END, 'queued'
			FROM generate_series(1, %d) n`, org("n"), live/2, live),
		`ANALYZE job_queue`,
	} {
		if _, err := pool.Exec(ctx, stmt); err != nil {
			b.Fatalf("seed: %v\n%s", err, stmt)
		}
	}
	var sample []uuid.UUID
	rows, err := pool.Query(ctx, `SELECT id FROM job_queue WHERE status = 'SUCCEEDED' ORDER BY finished_at DESC LIMIT 400`)
	if err != nil {
		b.Fatal(err)
	}
	for rows.Next() {
		var id uuid.UUID
		if err := rows.Scan(&id); err != nil {
			b.Fatal(err)
		}
		sample = append(sample, id)
	}
	if err := rows.Err(); err != nil {
		b.Fatal(err)
	}
	if len(sample) < 400 {
		b.Fatalf("%d succeeded jobs to sample, want 400", len(sample))
	}
	// The first 200 are opened; each of the first 100 is a replay of one
	// of the last 200 of its tenant, so its page shows the lineage.
	for _, stmt := range []string{
		`INSERT INTO job_events (organization_id, job_id, run_number, attempt, event_type)
		 SELECT q.organization_id, q.id, 1, CASE WHEN e <> 'ENQUEUED' THEN 1 END, e
		 FROM job_queue q, unnest(ARRAY['ENQUEUED','LEASED','SUCCEEDED']::job_event_type[]) e
		 WHERE q.id = ANY($1)`,
	} {
		if _, err := pool.Exec(ctx, stmt, sample[:200]); err != nil {
			b.Fatalf("seed events: %v", err)
		}
	}
	if _, err := pool.Exec(ctx, `INSERT INTO job_replays (organization_id, source_job_id, source_run_number, replay_job_id, replay_request_key, reason)
		SELECT r.organization_id, s.id, 1, r.id, 'bench-' || r.id, 'console bench'
		FROM (SELECT id, organization_id, row_number() OVER (PARTITION BY organization_id ORDER BY id) rn FROM job_queue WHERE id = ANY($1)) r
		JOIN (SELECT id, organization_id, row_number() OVER (PARTITION BY organization_id ORDER BY id) rn FROM job_queue WHERE id = ANY($2)) s
		  ON s.organization_id = r.organization_id AND s.rn = r.rn`, sample[:100], sample[200:]); err != nil {
		b.Fatalf("seed lineage: %v", err)
	}
	if _, err := pool.Exec(ctx, `ANALYZE`); err != nil {
		b.Fatal(err)
	}
	return sample[:200]
}

// BenchmarkConsoleBulkRequeue compares a bulk requeue started from the
// console (its form's POST, then its progress endpoint polled until the
// run finishes) with the library's requeue.Bulk over the same number of
// dead-lettered jobs, chunk for chunk (the console's default chunk is the
// library's), in one run and alternating which goes first. It reports
// each one's jobs/s and their ratio; the console's target is within 10%
// of the library.
//
//	go test -run '^$' -bench ConsoleBulkRequeue -benchtime 2x ./console/
//
// RUNLEDGER_CONSOLE_BENCH_BULK sets the jobs per action (default 20,000).
func BenchmarkConsoleBulkRequeue(b *testing.B) {
	n := consoleBenchSize(b, "RUNLEDGER_CONSOLE_BENCH_BULK", 20_000)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	pool := testdb.New(b)
	org := uuid.Must(uuid.NewV7())
	h, err := console.New(pool, console.Options{Operator: func(*http.Request) (string, bool) { return "bench", true }})
	if err != nil {
		b.Fatal(err)
	}
	seed := func(jobType string) {
		b.Helper()
		for _, stmt := range []string{
			`INSERT INTO job_definitions (job_type) VALUES ($1)`,
			`INSERT INTO job_queue (job_type, organization_id, status, max_attempts, attempt, stage, started_at, finished_at, last_error_code)
			 SELECT $1, $2, 'DEAD_LETTERED', 1, 1, 'failed', now() - interval '2 minutes', now() - interval '1 minute', 'provider.down'
			 FROM generate_series(1, $3::int)`,
		} {
			args := []any{jobType, org, n}[:strings.Count(stmt, "$")]
			if _, err := pool.Exec(ctx, stmt, args...); err != nil {
				b.Fatalf("seed: %v", err)
			}
		}
		if _, err := pool.Exec(ctx, `ANALYZE job_queue`); err != nil {
			b.Fatal(err)
		}
	}
	library := func(jobType string) time.Duration {
		start := time.Now()
		sum, err := requeue.Bulk(ctx, pool, requeue.BulkRequest{Scope: runledger.Organization(org), Reason: "bench",
			Filter: &requeue.Filter{Status: requeue.DeadLettered, JobType: jobType}}, nil)
		took := time.Since(start)
		if err != nil || sum.Requeued != n {
			b.Fatalf("library bulk requeue: %+v, %v; want %d requeued", sum, err, n)
		}
		return took
	}
	viaConsole := func(jobType string) time.Duration {
		form := url.Values{"status": {"DEAD_LETTERED"}, "type": {jobType}, "org": {org.String()}, "reason": {"bench"},
			"mode": {"run"}, "counted": {strconv.Itoa(n)}, "finished_until": {time.Now().Add(time.Hour).UTC().Format(time.RFC3339)}}
		req := httptest.NewRequest(http.MethodPost, "/bulk/requeue", strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		rec := httptest.NewRecorder()
		start := time.Now()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusSeeOther {
			b.Fatalf("POST /bulk/requeue: %d\n%s", rec.Code, rec.Body.String())
		}
		progress := "/api" + rec.Header().Get("Location")
		for {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, progress, nil))
			body := rec.Body.String()
			if strings.Contains(body, `"finished":true`) {
				took := time.Since(start)
				if want := fmt.Sprintf(`"done":%d,"ok":%d,"refused":0`, n, n); !strings.Contains(body, want) {
					b.Fatalf("console bulk requeue: %s, want %s", body, want)
				}
				return took
			}
			// The page's script polls too; 5 ms is well under a chunk.
			time.Sleep(5 * time.Millisecond)
		}
	}
	var libTook, conTook time.Duration
	round := 0
	for b.Loop() {
		lib, con := fmt.Sprintf("lib-%d", round), fmt.Sprintf("con-%d", round)
		b.StopTimer()
		seed(lib)
		seed(con)
		b.StartTimer()
		if round%2 == 0 {
			libTook += library(lib)
			conTook += viaConsole(con)
		} else {
			conTook += viaConsole(con)
			libTook += library(lib)
		}
		round++
	}
	libRate := float64(n*round) / libTook.Seconds()
	conRate := float64(n*round) / conTook.Seconds()
	b.ReportMetric(libRate, "library-jobs/s")
	b.ReportMetric(conRate, "console-jobs/s")
	b.ReportMetric(conRate/libRate, "console/library")
}
