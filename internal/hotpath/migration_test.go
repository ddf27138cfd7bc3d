package hotpath_test

import (
	"context"
	"database/sql"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/runledger-go/runledger/goose"
	"github.com/runledger-go/runledger/internal/testdb"
)

// TestMigrationCost times migrations 00013 and 00014, then 00015, then
// 00016 (whose index holds only PENDING jobs: its cost is one scan of the
// table), then Down to 00012 and Up again, on a database holding
// RUNLEDGER_HOTPATH_JOBS finished jobs (default 1,000,000) with three
// events each, analyzed, and logs the bytes each retained job takes at
// each step (heap and indexes of job_queue and job_events). Run only when
// RUNLEDGER_HOTPATH is set:
//
//	RUNLEDGER_HOTPATH=1 go test ./internal/hotpath -run TestMigrationCost -v
func TestMigrationCost(t *testing.T) {
	if os.Getenv("RUNLEDGER_HOTPATH") == "" {
		t.Skip("a measurement, not a test: set RUNLEDGER_HOTPATH=1 to run it")
	}
	n := 1_000_000
	if s := os.Getenv("RUNLEDGER_HOTPATH_JOBS"); s != "" {
		var err error
		if n, err = strconv.Atoi(s); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	db, err := sql.Open("pgx", testdb.NewEmpty(t))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := goose.UpTo(ctx, db, 12); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	for _, stmt := range []string{
		`INSERT INTO job_definitions (job_type) VALUES ('t')`,
		`INSERT INTO job_queue (organization_id, job_type, status, max_attempts, attempt, stage, started_at, finished_at)
		 SELECT ('00000000-0000-4000-8000-0000000000' || lpad((n % 50)::text, 2, '0'))::uuid, 't', 'SUCCEEDED', 3, 1, 'completed',
		        now() - interval '2 days', now() - interval '1 day'
		 FROM generate_series(1, $1::int) n`,
		`INSERT INTO job_events (organization_id, job_id, run_number, event_type)
		 SELECT organization_id, id, 1, e::job_event_type FROM job_queue, unnest(ARRAY['ENQUEUED', 'LEASED', 'SUCCEEDED']) e`,
		`ANALYZE`,
	} {
		var args []any
		if strings.Contains(stmt, "$1") {
			args = []any{n}
		}
		if _, err := db.ExecContext(ctx, stmt, args...); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("loaded %d jobs with 3 events each in %s", n, time.Since(t0).Round(time.Second))
	step := func(name string, fn func() error) {
		t.Helper()
		t0 := time.Now()
		if err := fn(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		t.Logf("%-28s %s", name, time.Since(t0).Round(time.Millisecond))
	}
	before := retainedBytes(t, ctx, db, n)
	step("up 00013 and 00014", func() error { _, err := goose.UpTo(ctx, db, 14); return err })
	diet := retainedBytes(t, ctx, db, n)
	step("up 00015", func() error { _, err := goose.UpTo(ctx, db, 15); return err })
	after := retainedBytes(t, ctx, db, n)
	t.Logf("bytes per retained finished job (job_queue and job_events), at 00012 -> 00014 -> 00015: heap %d -> %d -> %d, indexes %d -> %d -> %d, total %d -> %d -> %d",
		before.heap, diet.heap, after.heap, before.indexes, diet.indexes, after.indexes,
		before.heap+before.indexes, diet.heap+diet.indexes, after.heap+after.indexes)
	step("up 00016", func() error { _, err := goose.UpTo(ctx, db, 16); return err })
	step("down to 00012", func() error { _, err := goose.DownTo(ctx, db, 12); return err })
	step("up 00013 to 00016 again", func() error { _, err := goose.UpTo(ctx, db, 16); return err })
}

// retained is what the retained jobs take on disk, per job.
type retained struct{ heap, indexes int64 }

// retainedBytes is the heap (with TOAST and the free space map) and the
// indexes of job_queue and job_events, divided by the n jobs they hold.
func retainedBytes(t *testing.T, ctx context.Context, db *sql.DB, n int) retained {
	t.Helper()
	var r retained
	if err := db.QueryRowContext(ctx, `SELECT sum(pg_table_size(c))::bigint, sum(pg_indexes_size(c))::bigint
		FROM unnest(ARRAY['job_queue'::regclass, 'job_events'::regclass]) c`).Scan(&r.heap, &r.indexes); err != nil {
		t.Fatal(err)
	}
	return retained{heap: r.heap / int64(n), indexes: r.indexes / int64(n)}
}
