package goose_test

import (
	"context"
	"database/sql"
	"errors"
	"io/fs"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	_ "github.com/jackc/pgx/v5/stdlib"
	pgoose "github.com/pressly/goose/v3"

	"github.com/runledger-go/runledger/goose"
	"github.com/runledger-go/runledger/internal/dberr"
	"github.com/runledger-go/runledger/internal/testdb"
	"github.com/runledger-go/runledger/schema"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// latest is the number of migrations in schema/ (they are numbered from
// 1 without gaps).
var latest = func() int64 {
	files, err := fs.Glob(schema.FS, "*.sql")
	if err != nil {
		panic(err)
	}
	return int64(len(files))
}()

func open(t *testing.T, url string) *sql.DB {
	t.Helper()
	db, err := sql.Open("pgx", url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func ctx(t *testing.T) context.Context {
	t.Helper()
	c, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return c
}

// objects lists the schema's user objects: tables, views, types,
// functions; not an extension's own (Citus puts views in public).
func objects(t *testing.T, db *sql.DB) string {
	t.Helper()
	var s string
	err := db.QueryRow(`
		SELECT coalesce(string_agg(name, ',' ORDER BY name), '') FROM (
		    SELECT relname AS name, c.oid FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		    WHERE n.nspname = 'public' AND c.relkind IN ('r', 'v', 'i', 'S') AND relname NOT LIKE 'goose_db_version%'
		    UNION ALL
		    SELECT typname, t.oid FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace
		    WHERE n.nspname = 'public' AND t.typtype = 'e'
		    UNION ALL
		    SELECT proname, p.oid FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
		    WHERE n.nspname = 'public') o
		WHERE NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.objid = o.oid AND d.deptype = 'e')`).Scan(&s)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestMigrationsGoUpDownToZeroAndUpAgain(t *testing.T) {
	t.Parallel()
	c := ctx(t)
	db := open(t, testdb.NewEmpty(t))

	if err := goose.Up(c, db); err != nil {
		t.Fatal(err)
	}
	first := objects(t, db)
	for _, want := range []string{"job_queue", "job_events", "job_replays", "job_definitions", "workflow_steps",
		"job_execution_resource_claims", "job_status", "job_event_type", "uq_job_replays_source_request"} {
		if !strings.Contains(first, want) {
			t.Fatalf("after up, %s is missing from %s", want, first)
		}
	}
	if cur, lat, err := goose.Version(c, db); err != nil || cur != latest || lat != latest {
		t.Fatalf("version %d/%d %v, want %d", cur, lat, err, latest)
	}
	if err := goose.Up(c, db); err != nil { // nothing pending: no-op
		t.Fatal(err)
	}

	res, err := goose.DownTo(c, db, 0)
	if err != nil || int64(len(res)) != latest {
		t.Fatalf("down to zero: %d results, %v", len(res), err)
	}
	if left := objects(t, db); left != "" {
		t.Fatalf("down to zero left %s", left)
	}
	if cur, _, err := goose.Version(c, db); err != nil || cur != 0 {
		t.Fatalf("version after down: %d %v", cur, err)
	}
	if _, err := goose.Down(c, db); !errors.Is(err, pgoose.ErrNoNextVersion) {
		t.Fatalf("down at zero: %v", err)
	}

	if err := goose.Up(c, db); err != nil {
		t.Fatal(err)
	}
	if again := objects(t, db); again != first {
		t.Fatalf("up again differs:\n%s\n%s", first, again)
	}
	statuses, err := goose.StatusAll(c, db)
	if err != nil || int64(len(statuses)) != latest {
		t.Fatalf("status: %d %v", len(statuses), err)
	}
	for _, s := range statuses {
		if s.State != pgoose.StateApplied {
			t.Fatalf("migration %d %s", s.Source.Version, s.State)
		}
	}
}

func TestEachDownUndoesItsOwnMigrationOnly(t *testing.T) {
	t.Parallel()
	c := ctx(t)
	db := open(t, testdb.NewEmpty(t))
	var snapshots []string
	for v := int64(1); v <= latest; v++ {
		if _, err := goose.UpTo(c, db, v); err != nil {
			t.Fatal(err)
		}
		snapshots = append(snapshots, objects(t, db))
	}
	for v := int64(latest); v >= 2; v-- {
		res, err := goose.Down(c, db)
		if err != nil || res.Source.Version != v {
			t.Fatalf("down from %d: %v %v", v, res, err)
		}
		if got := objects(t, db); got != snapshots[v-2] {
			t.Fatalf("down from %d left\n%s\nwant\n%s", v, got, snapshots[v-2])
		}
	}
}

func TestReplayDownDropsLineageButKeepsJobs(t *testing.T) {
	t.Parallel()
	c := ctx(t)
	db := open(t, testdb.NewEmpty(t))
	if err := goose.Up(c, db); err != nil {
		t.Fatal(err)
	}
	mustExec(t, db, `INSERT INTO job_definitions (job_type) VALUES ('t')`)
	mustExec(t, db, `INSERT INTO job_queue (id, job_type, max_attempts) VALUES
	    ('00000000-0000-0000-0000-000000000001', 't', 1), ('00000000-0000-0000-0000-000000000002', 't', 1)`)
	mustExec(t, db, `INSERT INTO job_replays (source_job_id, source_run_number, replay_request_key, reason, replay_job_id)
	    VALUES ('00000000-0000-0000-0000-000000000001', 1, 'k', 'r', '00000000-0000-0000-0000-000000000002')`)
	// The foreign keys' delete actions: NO ACTION for the replay, CASCADE
	// for the source; and RESTRICT for a workflow step's job from 00010
	// (NO ACTION below it).
	actions := func() (replay, source, step string) {
		t.Helper()
		if err := db.QueryRow(`SELECT
		    (SELECT confdeltype::text FROM pg_constraint WHERE conname = 'fk_job_replays_replay_job'),
		    (SELECT confdeltype::text FROM pg_constraint WHERE conname = 'fk_job_replays_source_job'),
		    (SELECT confdeltype::text FROM pg_constraint WHERE conname = 'fk_workflow_steps_job')`).Scan(&replay, &source, &step); err != nil {
			t.Fatal(err)
		}
		return replay, source, step
	}
	if replay, source, step := actions(); replay != "a" || source != "c" || step != "r" {
		t.Fatalf("delete actions replay %q source %q step %q, want a, c and r", replay, source, step)
	}
	if _, err := goose.DownTo(c, db, 9); err != nil {
		t.Fatal(err)
	}
	if replay, source, step := actions(); replay != "a" || source != "c" || step != "a" {
		t.Fatalf("below 00010: delete actions replay %q source %q step %q, want a, c and a", replay, source, step)
	}
	// Down to the bulk replay index, which goes first; the lineage table
	// stays.
	if _, err := goose.DownTo(c, db, 5); err != nil {
		t.Fatal(err)
	}
	if res, err := goose.Down(c, db); err != nil || !strings.Contains(res.Source.Path, "00005_job_replays_bulk") {
		t.Fatalf("down: %v %v", res, err)
	}
	var indexes int
	if err := db.QueryRow(`SELECT count(*) FROM pg_class WHERE relname IN ('idx_job_queue_succeeded_type_scope_finished', 'job_replays')`).Scan(&indexes); err != nil || indexes != 1 {
		t.Fatalf("after the bulk index's down: %d of the index and the lineage table (%v), want the table only", indexes, err)
	}
	if res, err := goose.Down(c, db); err != nil || !strings.Contains(res.Source.Path, "00004_job_replays") {
		t.Fatalf("down: %v %v", res, err)
	}
	var tables, jobs int
	if err := db.QueryRow(`SELECT (SELECT count(*) FROM pg_class WHERE relname = 'job_replays'), (SELECT count(*) FROM job_queue)`).Scan(&tables, &jobs); err != nil {
		t.Fatal(err)
	}
	if tables != 0 || jobs != 2 {
		t.Fatalf("after down: job_replays tables %d, jobs %d; want 0 and 2", tables, jobs)
	}
}

func mustExec(t *testing.T, db *sql.DB, q string, args ...any) {
	t.Helper()
	if _, err := db.Exec(q, args...); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

func TestTwoMigratorsAtOnceTakeTurns(t *testing.T) {
	t.Parallel()
	c := ctx(t)
	url := testdb.NewEmpty(t)
	admin := open(t, url)

	// Hold goose's advisory lock so both migrators start while it is taken,
	// then let go once both have tried for it.
	holder, err := admin.Conn(c)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	if _, err := holder.ExecContext(c, `SELECT pg_advisory_lock(4097083626)`); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i := range errs {
		db := open(t, url+"&application_name=migrator")
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			errs[i] = goose.Up(c, db)
		}(i)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		var tried int
		if err := admin.QueryRow(`SELECT count(*) FROM pg_stat_activity
		    WHERE application_name = 'migrator' AND query LIKE '%pg_try_advisory_lock%'`).Scan(&tried); err != nil {
			t.Fatal(err)
		}
		if tried == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the migrators never tried for the lock")
		}
		time.Sleep(10 * time.Millisecond) // polling interval, not synchronisation
	}
	if _, err := holder.ExecContext(c, `SELECT pg_advisory_unlock(4097083626)`); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("migrator %d: %v", i, err)
		}
	}
	var applied, distinct int64
	if err := admin.QueryRow(`SELECT count(*), count(DISTINCT version_id) FROM goose_db_version WHERE version_id > 0`).Scan(&applied, &distinct); err != nil {
		t.Fatal(err)
	}
	if applied != latest || distinct != latest {
		t.Fatalf("%d version rows (%d distinct), want each of %d once", applied, distinct, latest)
	}
}

// The goose command-line tool runs goose.RunContext on a directory; this is
// that code path pointed at schema/, sharing history with package goose.
func TestGooseCommandLinePathUsesTheSameFiles(t *testing.T) {
	t.Parallel()
	c := ctx(t)
	db := open(t, testdb.NewEmpty(t))
	if err := pgoose.SetDialect("postgres"); err != nil {
		t.Fatal(err)
	}
	if err := pgoose.RunContext(c, "up-to", db, "../schema", "2"); err != nil {
		t.Fatal(err)
	}
	if cur, _, err := goose.Version(c, db); err != nil || cur != 2 {
		t.Fatalf("after the CLI path's up-to 2, package goose sees %d (%v)", cur, err)
	}
	if err := goose.Up(c, db); err != nil {
		t.Fatal(err)
	}
	if err := pgoose.RunContext(c, "status", db, "../schema"); err != nil {
		t.Fatal(err)
	}
	if v, err := pgoose.GetDBVersionContext(c, db); err != nil || v != latest {
		t.Fatalf("the CLI path sees version %d (%v)", v, err)
	}
}

// pgCode returns the SQLSTATE and constraint of a database error.
func pgCode(err error) (string, string) {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code, dberr.Constraint(pgErr)
	}
	return "", ""
}

// The tenant-key migration moves a populated database both ways: Up gives
// the global scope's rows the nil UUID and every child its job's tenant,
// Down gives them back their NULLs and drops the children's column, and
// nothing is lost either way.
func TestTenantKeysMigrationMovesDataBothWays(t *testing.T) {
	t.Parallel()
	c := ctx(t)
	db := open(t, testdb.NewEmpty(t))
	if _, err := goose.UpTo(c, db, 6); err != nil {
		t.Fatal(err)
	}
	const (
		org    = "'00000000-0000-4000-8000-0000000000aa'"
		global = "'00000000-0000-0000-0000-000000000001'"
		replay = "'00000000-0000-0000-0000-000000000002'"
		orgJob = "'00000000-0000-0000-0000-000000000003'"
	)
	for _, q := range []string{
		`INSERT INTO job_definitions (job_type) VALUES ('t')`,
		`INSERT INTO job_queue (id, job_type, max_attempts, status, organization_id, idempotency_key, enqueue_request) VALUES
		    (` + global + `, 't', 1, 'SUCCEEDED', NULL, 'k', '{}'), (` + replay + `, 't', 1, 'PENDING', NULL, NULL, NULL),
		    (` + orgJob + `, 't', 1, 'PENDING', ` + org + `, 'k', '{}')`,
		`INSERT INTO job_events (job_id, run_number, event_type) VALUES (` + global + `, 1, 'ENQUEUED'), (` + orgJob + `, 1, 'ENQUEUED')`,
		`INSERT INTO job_replays (source_job_id, source_run_number, replay_request_key, reason, replay_job_id)
		    VALUES (` + global + `, 1, 'k', 'r', ` + replay + `)`,
		`INSERT INTO workflow_runs (id, workflow_type, organization_id) VALUES (` + orgJob + `, 'wf', ` + org + `)`,
		`INSERT INTO workflow_steps (workflow_run_id, step_key, job_id) VALUES (` + orgJob + `, 's', ` + orgJob + `)`,
	} {
		mustExec(t, db, q)
	}
	count := func(q string) int {
		t.Helper()
		var n int
		if err := db.QueryRow(q).Scan(&n); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		return n
	}
	if _, err := goose.UpTo(c, db, 7); err != nil {
		t.Fatal(err)
	}
	for q, want := range map[string]int{
		`SELECT count(*) FROM job_queue WHERE organization_id = '00000000-0000-0000-0000-000000000000'`:                   2,
		`SELECT count(*) FROM job_events e JOIN job_queue q ON q.organization_id = e.organization_id AND q.id = e.job_id`: 2,
		`SELECT count(*) FROM job_replays WHERE organization_id = '00000000-0000-0000-0000-000000000000'`:                 1,
		`SELECT count(*) FROM workflow_steps WHERE organization_id = ` + org:                                              1,
	} {
		if n := count(q); n != want {
			t.Fatalf("after Up: %s = %d, want %d", q, n, want)
		}
	}
	// The keys now lead with the tenant: the same key may be used again in
	// another tenant, and not in the same one.
	mustExec(t, db, `INSERT INTO job_queue (id, job_type, max_attempts, organization_id, idempotency_key, enqueue_request)
	    VALUES (gen_random_uuid(), 't', 1, '00000000-0000-4000-8000-0000000000bb', 'k', '{}')`)
	if _, err := db.Exec(`INSERT INTO job_queue (id, job_type, max_attempts, idempotency_key, enqueue_request)
	    VALUES (gen_random_uuid(), 't', 1, 'k', '{}')`); err == nil {
		t.Fatal("a second global job holds key k")
	}
	mustExec(t, db, `DELETE FROM job_queue WHERE organization_id = '00000000-0000-4000-8000-0000000000bb'`)

	if _, err := goose.DownTo(c, db, 6); err != nil {
		t.Fatal(err)
	}
	for q, want := range map[string]int{
		`SELECT count(*) FROM job_queue WHERE organization_id IS NULL`:  2,
		`SELECT count(*) FROM job_queue WHERE organization_id = ` + org: 1,
		`SELECT count(*) FROM job_events`:                               2,
		`SELECT count(*) FROM job_replays`:                              1,
		`SELECT count(*) FROM workflow_steps WHERE job_id = ` + orgJob:  1,
		`SELECT count(*) FROM information_schema.columns WHERE column_name = 'organization_id' AND table_name IN
		    ('job_events', 'job_replays', 'job_execution_resource_claims', 'workflow_steps')`: 0,
	} {
		if n := count(q); n != want {
			t.Fatalf("after Down: %s = %d, want %d", q, n, want)
		}
	}
}
