package bench

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/runledger-go/runledger/goose"
)

// What the bench seeds. Benchmark tooling, not the library: the SQL here
// builds a data set, it is not a statement the library sends.
const (
	// JobType is the job type of every seeded and replayed job.
	JobType = "runledger-bench"
	// SeedKey is the request key and reason of the seeded lineage rows:
	// replaying source n with them is the Existing path.
	SeedKey = "seed"
	// Reason is the reason of the replays the bench makes.
	Reason = "bench"
)

// Org is the organization every seeded source belongs to (the scope of
// every request).
var Org = uuid.MustParse("6a1f0000-0000-4000-8000-00000000b0b0")

// SourceID is the id of seeded source n (1 <= n <= sources); ids past the
// seeded range are jobs that do not exist. The SQL function
// runledger_bench_id computes the same.
func SourceID(n int64) uuid.UUID {
	return uuid.MustParse(fmt.Sprintf("00000000-0000-7000-8000-%012x", n))
}

// helperFunctions are used by the seeding and by the pgbench scripts.
var helperFunctions = []string{
	`CREATE OR REPLACE FUNCTION runledger_bench_id(n bigint) RETURNS uuid
	 LANGUAGE sql IMMUTABLE PARALLEL SAFE
	 AS $$ SELECT ('00000000-0000-7000-8000-' || lpad(to_hex(n), 12, '0'))::uuid $$`,
	`CREATE OR REPLACE FUNCTION runledger_bench_replay_id(n bigint) RETURNS uuid
	 LANGUAGE sql IMMUTABLE PARALLEL SAFE
	 AS $$ SELECT ('00000000-0000-7000-9000-' || lpad(to_hex(n), 12, '0'))::uuid $$`,
	// A time-ordered id (millisecond time, then random bits), as the
	// UUIDv7 ids the Go client generates, so that pgbench's inserts land at
	// the same end of the primary-key index as Go's.
	`CREATE OR REPLACE FUNCTION runledger_bench_new_id() RETURNS uuid
	 LANGUAGE sql VOLATILE PARALLEL SAFE
	 AS $$ SELECT (lpad(to_hex((extract(epoch FROM clock_timestamp()) * 1000)::bigint), 12, '0')
	              || '7' || substr(md5(random()::text), 1, 19))::uuid $$`,
}

// prepare migrates the database at url to the current schema and seeds it
// with n succeeded sources, each replayed once (a replay job, its ENQUEUED
// event and its lineage row, under SeedKey), after removing what an
// earlier run left of JobType. It ends with VACUUM ANALYZE and a
// CHECKPOINT so that the runs start from fresh statistics and no pending
// checkpoint.
func prepare(ctx context.Context, url string, n int, logf func(string, ...any)) error {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return err
	}
	sqlDB := stdlib.OpenDB(*cfg)
	err = migrate(ctx, sqlDB)
	_ = sqlDB.Close()
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	t0 := time.Now()
	steps := append([]string(nil), helperFunctions...)
	steps = append(steps,
		`INSERT INTO job_definitions (job_type) VALUES ('`+JobType+`')
		 ON CONFLICT (job_type) DO UPDATE SET is_enabled = true`,
		// Lineage first: it references the replay jobs without cascade.
		`DELETE FROM job_replays WHERE source_job_id IN (SELECT id FROM job_queue WHERE job_type = '`+JobType+`')`,
		// Events have no foreign key to their job: they go by hand.
		`DELETE FROM job_events e USING job_queue q
		 WHERE q.organization_id = e.organization_id AND q.id = e.job_id AND q.job_type = '`+JobType+`'`,
		`DELETE FROM job_queue WHERE job_type = '`+JobType+`'`,
		`INSERT INTO job_queue (id, job_type, organization_id, payload, status, priority, run_number, attempt,
		     max_attempts, timeout_seconds, next_run_at, worker_id, started_at, finished_at, stage,
		     progress_done, progress_total, output, created_at, updated_at)
		 SELECT runledger_bench_id(n), '`+JobType+`', '`+Org.String()+`',
		        jsonb_build_object('to', 'user' || n || '@example.com', 'template', 'receipt', 'n', n),
		        'SUCCEEDED', 100, 1, 1, 5, 900, now() - interval '10 minutes', 'bench-worker',
		        now() - interval '9 minutes', now() - interval '8 minutes', 'completed', 1, 1, '{"sent": true}',
		        now() - interval '10 minutes', now() - interval '8 minutes'
		 FROM generate_series(1, $1::bigint) n`,
		`INSERT INTO job_queue (id, job_type, organization_id, payload, priority, max_attempts, timeout_seconds,
		     next_run_at, stage, created_at, updated_at)
		 SELECT runledger_bench_replay_id(n), '`+JobType+`', '`+Org.String()+`',
		        jsonb_build_object('to', 'user' || n || '@example.com', 'template', 'receipt', 'n', n),
		        100, 5, 900, now() - interval '5 minutes', 'queued', now() - interval '5 minutes', now() - interval '5 minutes'
		 FROM generate_series(1, $1::bigint) n`,
		`INSERT INTO job_events (organization_id, job_id, run_number, event_type, stage, payload, occurred_at)
		 SELECT '`+Org.String()+`', runledger_bench_replay_id(n), 1, 'ENQUEUED', 'queued',
		        jsonb_build_object('job_type', '`+JobType+`', 'replayed_from_job_id', runledger_bench_id(n)::text,
		            'replayed_from_run_number', 1, 'replay_request_key', '`+SeedKey+`', 'reason', '`+SeedKey+`'),
		        now() - interval '5 minutes'
		 FROM generate_series(1, $1::bigint) n`,
		`INSERT INTO job_replays (organization_id, source_job_id, source_run_number, replay_request_key, replay_job_id, reason, created_at)
		 SELECT '`+Org.String()+`', runledger_bench_id(n), 1, '`+SeedKey+`', runledger_bench_replay_id(n), '`+SeedKey+`', now() - interval '5 minutes'
		 FROM generate_series(1, $1::bigint) n`,
	)
	for _, stmt := range steps {
		var args []any
		if containsParam(stmt) {
			args = []any{int64(n)}
		}
		if _, err := conn.Exec(ctx, stmt, args...); err != nil {
			return fmt.Errorf("seed: %w", err)
		}
	}
	for _, stmt := range []string{"VACUUM ANALYZE", "CHECKPOINT"} {
		if _, err := conn.Exec(ctx, stmt); err != nil {
			return fmt.Errorf("%s: %w", stmt, err)
		}
	}
	logf("seeded %d sources (and %d replays, events and lineage rows) in %s", n, n, time.Since(t0).Round(time.Millisecond))
	return nil
}

func containsParam(s string) bool {
	for i := 0; i+1 < len(s); i++ {
		if s[i] == '$' && s[i+1] == '1' {
			return true
		}
	}
	return false
}

func migrate(ctx context.Context, db *sql.DB) error {
	return goose.Up(ctx, db)
}
