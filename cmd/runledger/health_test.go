package main

import (
	"strings"
	"testing"

	"github.com/runledger-go/runledger/internal/testdb"
)

const (
	healthOrgA = "00000000-0000-4000-8000-0000000000a1"
	healthOrgB = "00000000-0000-4000-8000-0000000000b1"
)

// seedHealth writes, in each of two tenants, two due jobs, one scheduled,
// one leased with an expired lease, one job that succeeded ten minutes
// ago, and three (with two events each) that succeeded two days ago; in
// tenant A two of the old ones are a source and its replay.
func seedHealth(t *testing.T, e env) {
	t.Helper()
	pool := testdb.OpenPool(t, e.databaseURL, 2, nil)
	for _, stmt := range []string{
		`INSERT INTO job_definitions (job_type) VALUES ('mail'), ('sync')`,
		`INSERT INTO job_queue (organization_id, job_type, status, max_attempts, attempt, next_run_at, lease_expires_at, worker_id, started_at, finished_at, stage)
		 SELECT org::uuid, typ, st::job_status, 3, CASE WHEN st = 'PENDING' THEN 0 ELSE 1 END, now() + due,
		        CASE WHEN st = 'LEASED' THEN now() - interval '1 second' END, CASE WHEN st = 'LEASED' THEN 'w' END,
		        CASE WHEN st = 'SUCCEEDED' THEN now() - fin - interval '2 seconds' END, CASE WHEN st = 'SUCCEEDED' THEN now() - fin END, 'queued'
		 FROM (VALUES ('` + healthOrgA + `'), ('` + healthOrgB + `')) o(org)
		 CROSS JOIN (VALUES ('mail', 'PENDING', interval '-1 minute', NULL::interval), ('mail', 'PENDING', interval '-2 minutes', NULL),
		                    ('mail', 'PENDING', interval '1 hour', NULL), ('sync', 'LEASED', interval '0', NULL),
		                    ('mail', 'SUCCEEDED', interval '0', interval '10 minutes'),
		                    ('mail', 'SUCCEEDED', interval '0', interval '2 days'), ('mail', 'SUCCEEDED', interval '0', interval '2 days'),
		                    ('sync', 'SUCCEEDED', interval '0', interval '2 days')) j(typ, st, due, fin)`,
		`INSERT INTO job_events (organization_id, job_id, event_type)
		 SELECT organization_id, id, 'ENQUEUED' FROM job_queue, generate_series(1, 2) WHERE finished_at < now() - interval '1 day'`,
		`INSERT INTO job_replays (organization_id, source_job_id, source_run_number, replay_request_key, reason, replay_job_id)
		 SELECT '` + healthOrgA + `', min(id::text)::uuid, 1, 'k', 'r', max(id::text)::uuid FROM job_queue
		 WHERE organization_id = '` + healthOrgA + `' AND job_type = 'mail' AND finished_at < now() - interval '1 day'`,
	} {
		testdb.Exec(t, pool, stmt)
	}
}

func testStats(t *testing.T, c *cli) {
	e := db(t)
	seedHealth(t, e)
	out := object(t, c.ok(t, e, "stats", "--json").stdout)
	wantKeys(t, "stats", out, "at", "organization_id", "totals", "types", "window_seconds")
	wantUTC(t, out, "at")
	if num(t, out, "window_seconds") != 3600 || !isNull(out, "organization_id") {
		t.Fatalf("stats: %v", out)
	}
	types := list(t, out, "types")
	if len(types) != 2 || str(t, types[0], "job_type") != "mail" || str(t, types[1], "job_type") != "sync" {
		t.Fatalf("types %v", types)
	}
	wantKeys(t, "a type", types[0], "canceled", "dead_lettered", "expired_leases", "job_type", "leased", "oldest_due_age_seconds", "paused",
		"pending_due", "pending_scheduled", "run_time_p50_seconds", "run_time_p95_seconds", "succeeded")
	for key, want := range map[string]int64{"pending_due": 4, "pending_scheduled": 2, "leased": 0, "succeeded": 2, "run_time_p50_seconds": 2} {
		if got := num(t, types[0], key); got != want {
			t.Errorf("mail %s = %d, want %d", key, got, want)
		}
	}
	if num(t, types[1], "leased") != 2 || num(t, types[1], "expired_leases") != 2 || !isNull(types[1], "run_time_p50_seconds") || !isNull(types[1], "oldest_due_age_seconds") {
		t.Errorf("sync %v", types[1])
	}
	totals := sub(t, out, "totals")
	if num(t, totals, "pending_due") != 4 || num(t, totals, "leased") != 2 {
		t.Errorf("totals %v", totals)
	}
	// One tenant, one type.
	out = object(t, c.ok(t, e, "stats", "--org", healthOrgA, "--type", "mail", "--json").stdout)
	types = list(t, out, "types")
	if str(t, out, "organization_id") != healthOrgA || len(types) != 1 || num(t, types[0], "pending_due") != 2 {
		t.Fatalf("one tenant: %v", out)
	}
	// The table.
	text := c.ok(t, e, "stats").stdout
	for _, want := range []string{"TYPE", "DUE", "OLDEST DUE", "P95", "mail", "sync", "(all)", "every tenant"} {
		if !strings.Contains(text, want) {
			t.Errorf("the table lacks %q:\n%s", want, text)
		}
	}
	wantError(t, c.want(t, 2, e, "stats", "--window", "-1s", "--json"), "validation")
	wantError(t, c.want(t, 2, e, "stats", "--type", " ", "--json"), "validation")
}

func testPrune(t *testing.T, c *cli) {
	e := db(t)
	seedHealth(t, e)
	for _, args := range [][]string{
		{"prune"},
		{"prune", "--older-than", "24h", "--finished-before", "2026-01-01T00:00:00Z"},
		{"prune", "--older-than", "-1h"},
		{"prune", "--older-than", "24h", "--status", "PENDING"},
		{"prune", "--older-than", "24h", "--batch", "0"},
		{"prune", "--older-than", "24h", "--batch", "10001"},
		{"prune", "--finished-before", "yesterday"},
	} {
		wantError(t, c.want(t, 2, e, append(args, "--json")...), "validation")
	}
	jobs := func() int64 {
		pool := testdb.OpenPool(t, e.databaseURL, 1, nil)
		defer pool.Close()
		return testdb.Count(t, pool, "job_queue")
	}
	before := jobs()
	summary := func(args ...string) map[string]any {
		out := object(t, c.ok(t, e, append([]string{"prune", "--json"}, args...)...).stdout)
		wantKeys(t, "prune summary", out, "deleted_events", "deleted_jobs", "dry_run", "kept_for_lineage", "outcome")
		if str(t, out, "outcome") != "prune" {
			t.Fatalf("outcome %v", out)
		}
		return map[string]any{"dry_run": string(out["dry_run"]), "deleted_jobs": num(t, out, "deleted_jobs"),
			"deleted_events": num(t, out, "deleted_events"), "kept_for_lineage": num(t, out, "kept_for_lineage")}
	}
	want := func(what string, got, want map[string]any) {
		t.Helper()
		for k, v := range want {
			if got[k] != v {
				t.Errorf("%s: %s = %v, want %v (%v)", what, k, got[k], v, got)
			}
		}
	}
	// Tenant A, succeeded only: its three old jobs (a family of two) go.
	want("dry run", summary("--older-than", "24h", "--org", healthOrgA, "--status", "succeeded", "--dry-run", "--batch", "1"),
		map[string]any{"dry_run": "true", "deleted_jobs": int64(3), "deleted_events": int64(6), "kept_for_lineage": int64(0)})
	if jobs() != before {
		t.Fatal("a dry run deleted jobs")
	}
	want("tenant A", summary("--older-than", "24h", "--org", healthOrgA, "--status", "SUCCEEDED", "--batch", "1"),
		map[string]any{"dry_run": "false", "deleted_jobs": int64(3), "deleted_events": int64(6)})
	if jobs() != before-3 {
		t.Fatalf("%d jobs left of %d", jobs(), before)
	}
	// Every tenant, by a cutoff time: tenant B's three.
	text := c.ok(t, e, "prune", "--finished-before", "2100-01-01T00:00:00Z", "--status", "DEAD_LETTERED").stdout
	if !strings.Contains(text, "Deleted 0 jobs") {
		t.Fatalf("text output: %s", text)
	}
	want("every tenant", summary("--older-than", "24h"), map[string]any{"deleted_jobs": int64(3), "deleted_events": int64(6)})
	text = c.ok(t, e, "prune", "--older-than", "24h").stdout
	if !strings.Contains(text, "Deleted 0 jobs and 0 events that finished before") || !strings.Contains(text, "Kept 0 jobs for lineage") {
		t.Fatalf("text output: %s", text)
	}
}

// A prune killed mid-run (SIGKILL: no cleanup at all) keeps the batches it
// committed, each whole, and a rerun finishes the work.
func testPruneKilled(t *testing.T, c *cli) {
	e := db(t)
	pool := testdb.OpenPool(t, e.databaseURL, 2, nil)
	testdb.Exec(t, pool, `INSERT INTO job_definitions (job_type) VALUES ('mail')`)
	testdb.Exec(t, pool, `INSERT INTO job_queue (organization_id, job_type, status, max_attempts, attempt, stage, started_at, finished_at)
		SELECT $1, 'mail', 'SUCCEEDED', 3, 1, 'completed', now() - interval '3 days', now() - interval '2 days' - make_interval(secs => g)
		FROM generate_series(1, 20000) g`, healthOrgA)
	testdb.Exec(t, pool, `INSERT INTO job_queue (organization_id, job_type, status, max_attempts, attempt, stage, started_at, finished_at)
		VALUES ($1, 'mail', 'SUCCEEDED', 3, 1, 'completed', now() - interval '2 minutes', now() - interval '1 minute')`, healthOrgA)
	count := func() int64 { return testdb.Count(t, pool, "job_queue") }
	cmd := c.command(t, e, "prune", "--older-than", "24h", "--org", healthOrgA, "--batch", "10", "--json")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	testdb.WaitFor(t, "the prune's first batches", func() bool { return count() < 20001 })
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	// A COMMIT the prune sent just before it died may still be running on
	// the server: count once no session of the database but this one's is
	// inside a statement or a transaction.
	testdb.WaitFor(t, "the killed prune's session to end", func() bool {
		return testdb.Scalar[int64](t, pool, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND backend_type = 'client backend' AND pid <> pg_backend_pid() AND state <> 'idle'`) == 0
	})
	left := count()
	if left == 1 || (20001-left)%10 != 0 {
		t.Fatalf("%d jobs left after the kill: want whole batches of 10 deleted, and some left", left)
	}
	out := object(t, c.ok(t, e, "prune", "--older-than", "24h", "--org", healthOrgA, "--json").stdout)
	if num(t, out, "deleted_jobs") != left-1 || count() != 1 {
		t.Fatalf("rerun: %v, %d jobs left", out, count())
	}
}
