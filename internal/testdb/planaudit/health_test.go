package planaudit

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/runledger-go/runledger/internal/testdb"
)

// The stats' cost follows the live queue and the window, never the
// history: with the same live queue and window, growing the history of
// jobs that finished before the window five-fold leaves the pages the
// stats statements read (the whole plan's buffers) nearly unchanged, while
// a count of the finished jobs (the control) reads five times as many.
func TestStatsCostFollowsLiveQueue(t *testing.T) {
	t.Parallel()
	if testdb.Citus() {
		t.Skip("single-server plans; the Citus lane runs TestCitusRouting")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	queries, err := Load("../../../db")
	if err != nil {
		t.Fatal(err)
	}
	pool := testdb.New(t)
	const org = "'00000000-0000-4000-8000-000000000001'"
	history := func(from, to int) string {
		// Finished hours to days ago, before any window; three tenants.
		return fmt.Sprintf(`INSERT INTO job_queue (job_type, organization_id, status, max_attempts, attempt, stage, started_at, finished_at, created_at)
			SELECT 'type-' || (n %% 5), ('00000000-0000-4000-8000-00000000000' || (n %% 3))::uuid,
			       (ARRAY['SUCCEEDED','SUCCEEDED','DEAD_LETTERED','CANCELED']::job_status[])[1 + n %% 4], 3, 1, 'completed',
			       now() - interval '2 hours' - make_interval(secs => n) - interval '1 second',
			       now() - interval '2 hours' - make_interval(secs => n), now() - interval '3 hours' - make_interval(secs => n)
			FROM generate_series(%d, %d) n`, from, to)
	}
	for _, stmt := range []string{
		`INSERT INTO job_definitions (job_type) SELECT 'type-' || n FROM generate_series(0, 4) n`,
		history(1, 40_000),
		// The live queue: 2,000 jobs, due, scheduled and leased.
		`INSERT INTO job_queue (job_type, organization_id, status, max_attempts, attempt, next_run_at, lease_expires_at, worker_id, stage)
		 SELECT 'type-' || (n % 5), ('00000000-0000-4000-8000-00000000000' || (n % 3))::uuid,
		        (ARRAY['PENDING','PENDING','LEASED']::job_status[])[1 + n % 3], 3, CASE WHEN n % 3 = 2 THEN 1 ELSE 0 END,
		        now() + make_interval(secs => n - 1000),
		        CASE WHEN n % 3 = 2 THEN now() + make_interval(secs => n - 1000) END,
		        CASE WHEN n % 3 = 2 THEN 'w' END, 'queued'
		 FROM generate_series(1, 2000) n`,
		// The window: 1,000 jobs that finished in the last hour.
		`INSERT INTO job_queue (job_type, organization_id, status, max_attempts, attempt, stage, started_at, finished_at)
		 SELECT 'type-' || (n % 5), ('00000000-0000-4000-8000-00000000000' || (n % 3))::uuid, 'SUCCEEDED', 3, 1, 'completed',
		        now() - make_interval(secs => n * 3) - interval '2 seconds', now() - make_interval(secs => n * 3)
		 FROM generate_series(1, 1000) n`,
		`VACUUM ANALYZE job_queue`,
	} {
		testdb.Exec(t, pool, stmt)
	}
	type reading struct{ all, tenant, control int }
	read := func() reading {
		t.Helper()
		var r reading
		for _, c := range []struct {
			name string
			into *int
		}{
			{"JobStatsAll", &r.all},
			{"JobStatsTenant", &r.tenant},
		} {
			*c.into = planPages(t, ctx, pool, statsSQL(t, queries, c.name, org))
		}
		r.control = planPages(t, ctx, pool, `SELECT count(*) FROM job_queue WHERE status IN ('SUCCEEDED', 'DEAD_LETTERED', 'CANCELED')`)
		return r
	}
	small := read()
	testdb.Exec(t, pool, history(40_001, 200_000))
	testdb.Exec(t, pool, `VACUUM ANALYZE job_queue`)
	big := read()
	t.Logf("pages read at 43,000 and 203,000 jobs: stats over every tenant %d -> %d, one tenant %d -> %d; the control %d -> %d",
		small.all, big.all, small.tenant, big.tenant, small.control, big.control)
	if big.control < 4*small.control {
		t.Fatalf("the control read %d then %d pages: the history did not grow enough to tell", small.control, big.control)
	}
	for _, c := range []struct {
		name       string
		small, big int
	}{{"JobStatsAll", small.all, big.all}, {"JobStatsTenant", small.tenant, big.tenant}} {
		// Some pages may come or go with the plan's choice of index (up to
		// 55 seen on 15.18); a cost that followed the history would grow
		// with the control, by thousands.
		if c.big-c.small > max(150, c.small/5) || 20*c.big > big.control {
			t.Errorf("%s read %d pages, then %d with five times the history (the control %d): its cost follows the history",
				c.name, c.small, c.big, big.control)
		}
	}
}

// planPages runs sql under EXPLAIN (ANALYZE, BUFFERS) in a transaction
// that it rolls back and returns the shared pages its plan read (hit or
// read), CTEs included.
func planPages(t *testing.T, ctx context.Context, q interface {
	Begin(context.Context) (pgx.Tx, error)
}, sql string) int {
	t.Helper()
	tx, err := q.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	var raw []byte
	if err := tx.QueryRow(ctx, "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) "+sql).Scan(&raw); err != nil {
		t.Fatalf("%v\n%s", err, sql)
	}
	var doc []struct {
		Plan bufNode `json:"Plan"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil || len(doc) != 1 {
		t.Fatalf("decode plan: %v", err)
	}
	return doc[0].Plan.Hit + doc[0].Plan.Read
}

// statsSQL is the stats statement name of queries with literals for its
// parameters: the tenant org, every job type, a one-hour window.
func statsSQL(t *testing.T, queries []Query, name, org string) string {
	t.Helper()
	q, ok := Get(queries, name)
	if !ok {
		t.Fatalf("no %s statement in db/", name)
	}
	sql, err := q.Substitute(func(param string) string {
		switch param {
		case "OrganizationID":
			return org + "::uuid"
		case "JobType":
			return "NULL::text"
		case "WindowSeconds":
			return "3600::float8"
		}
		t.Fatalf("%s: unexpected parameter %s", name, param)
		return ""
	})
	if err != nil {
		t.Fatal(err)
	}
	return sql
}

// The stats statements are never planned with parallel workers, even where
// the planner would find them cheapest: here every parallel cost is set to
// nothing, so that a grouped count of the live queue, the read the stats
// make, is planned under a Gather (the control).
func TestStatsPlanNoParallelWorkers(t *testing.T) {
	t.Parallel()
	if testdb.Citus() {
		t.Skip("single-server plans; on Citus each shard plans its own part")
	}
	ctx := testdb.Context(t)
	queries, err := Load("../../../db")
	if err != nil {
		t.Fatal(err)
	}
	pool := testdb.New(t)
	for _, stmt := range []string{
		`INSERT INTO job_definitions (job_type) SELECT 'type-' || n FROM generate_series(0, 4) n`,
		`INSERT INTO job_queue (job_type, organization_id, status, max_attempts, attempt, next_run_at, lease_expires_at, worker_id, stage)
		 SELECT 'type-' || (n % 5), ('00000000-0000-4000-8000-00000000000' || (n % 3))::uuid,
		        (ARRAY['PENDING','PENDING','LEASED']::job_status[])[1 + n % 3], 3, CASE WHEN n % 3 = 2 THEN 1 ELSE 0 END,
		        now() + make_interval(secs => n - 1000), CASE WHEN n % 3 = 2 THEN now() END, CASE WHEN n % 3 = 2 THEN 'w' END, 'queued'
		 FROM generate_series(1, 5000) n`,
		`INSERT INTO job_queue (job_type, organization_id, status, max_attempts, attempt, stage, started_at, finished_at)
		 SELECT 'type-' || (n % 5), ('00000000-0000-4000-8000-00000000000' || (n % 3))::uuid, 'SUCCEEDED', 3, 1, 'completed',
		        now() - make_interval(secs => n) - interval '2 seconds', now() - make_interval(secs => n)
		 FROM generate_series(1, 2000) n`,
		`VACUUM ANALYZE job_queue`,
	} {
		testdb.Exec(t, pool, stmt)
	}
	const org = "'00000000-0000-4000-8000-000000000001'"
	gathers := func(sql string) int {
		t.Helper()
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = tx.Rollback(ctx) }()
		for _, set := range []string{"parallel_setup_cost = 0", "parallel_tuple_cost = 0",
			"min_parallel_table_scan_size = 0", "min_parallel_index_scan_size = 0", "max_parallel_workers_per_gather = 2"} {
			testdb.Exec(t, tx, "SET LOCAL "+set)
		}
		var plan string
		if err := tx.QueryRow(ctx, "EXPLAIN (FORMAT JSON) "+sql).Scan(&plan); err != nil {
			t.Fatalf("%v\n%s", err, sql)
		}
		return strings.Count(plan, `"Node Type": "Gather`)
	}
	if n := gathers(`SELECT organization_id, job_type, status, count(*) FROM job_queue
		WHERE status IN ('PENDING', 'LEASED') GROUP BY 1, 2, 3`); n == 0 {
		t.Fatal("the control was planned without a Gather: the settings do not make parallel plans cheapest")
	}
	for _, name := range []string{"JobStatsAll", "JobStatsTenant"} {
		if n := gathers(statsSQL(t, queries, name, org)); n != 0 {
			t.Errorf("%s planned with %d Gather nodes: its reads may start parallel workers", name, n)
		}
	}
}
