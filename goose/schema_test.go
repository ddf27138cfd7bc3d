package goose_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runledger-go/runledger/internal/testdb"
)

// Each case is a statement that must fail with the SQLSTATE and constraint
// given, or succeed when the state is empty. They run in order on one
// database, each on its own (autocommit), so a failing one changes nothing.
type ddlCase struct {
	name       string
	sql        string
	state      string
	constraint string
}

func runCases(t *testing.T, pool *pgxpool.Pool, cases []ddlCase) {
	t.Helper()
	for _, c := range cases {
		_, err := pool.Exec(context.Background(), c.sql)
		state, constraint := pgCode(err)
		if c.state == "" {
			if err != nil {
				t.Errorf("%s: %v", c.name, err)
			}
			continue
		}
		if state == c.state && constraint == "" && testdb.Citus() && c.constraint == "chk_job_queue_execution_resource_claim_required" {
			// Citus passes a trigger's RAISE on without its CONSTRAINT.
			continue
		}
		if state != c.state || constraint != c.constraint {
			t.Errorf("%s: got %s %q (%v), want %s %q", c.name, state, constraint, err, c.state, c.constraint)
		}
	}
}

const (
	source = "'00000000-0000-0000-0000-0000000000a1'"
	other  = "'00000000-0000-0000-0000-0000000000a2'"
	third  = "'00000000-0000-0000-0000-0000000000a3'"
)

func seedJobs(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	for _, q := range []string{
		`INSERT INTO job_definitions (job_type) VALUES ('t')`,
		`INSERT INTO job_queue (id, job_type, max_attempts, status) VALUES (` + source + `, 't', 1, 'SUCCEEDED'),
		    (` + other + `, 't', 1, 'PENDING'), (` + third + `, 't', 1, 'PENDING')`,
	} {
		if _, err := pool.Exec(context.Background(), q); err != nil {
			t.Fatal(err)
		}
	}
}

func lineage(replay, key, reason string, run string) string {
	return `INSERT INTO job_replays (source_job_id, source_run_number, replay_request_key, reason, replay_job_id)
	    VALUES (` + source + `, ` + run + `, ` + key + `, ` + reason + `, ` + replay + `)`
}

func TestJobReplaysRules(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	seedJobs(t, pool)
	long := "'" + strings.Repeat("k", 513) + "'"
	limit := "'" + strings.Repeat("k", 512) + "'"
	runCases(t, pool, []ddlCase{
		{"blank key", lineage(other, "'  '", "'r'", "1"), "23514", "chk_job_replays_request_key"},
		{"empty key", lineage(other, "''", "'r'", "1"), "23514", "chk_job_replays_request_key"},
		{"513-byte key", lineage(other, long, "'r'", "1"), "23514", "chk_job_replays_request_key"},
		{"blank reason", lineage(other, "'k'", "' '", "1"), "23514", "chk_job_replays_reason_not_blank"},
		{"run zero", lineage(other, "'k'", "'r'", "0"), "23514", "chk_job_replays_source_run_positive"},
		{"source is its own replay", lineage(source, "'k'", "'r'", "1"), "23514", "chk_job_replays_distinct_jobs"},
		{"lineage in another tenant than its jobs", `INSERT INTO job_replays (organization_id, source_job_id, source_run_number, replay_request_key, reason, replay_job_id)
		    VALUES ('00000000-0000-0000-0000-00000000000b', ` + source + `, 1, 'k', 'r', ` + other + `)`, "23503", "fk_job_replays_source_job"},
		{"missing replay job", lineage("'00000000-0000-0000-0000-0000000000ff'", "'k'", "'r'", "1"), "23503", "fk_job_replays_replay_job"},
		{"512-byte key", lineage(other, limit, "'r'", "1"), "", ""},
		{"same source, run and key again", lineage(third, limit, "'r'", "1"), "23505", "uq_job_replays_source_request"},
		{"a job is the replay of one lineage row only", lineage(other, "'k2'", "'r'", "1"), "23505", "job_replays_pkey"},
		{"deleting only the replay is refused", `DELETE FROM job_queue WHERE id = ` + other, "23503", "fk_job_replays_replay_job"},
		{"one statement deleting both succeeds", `DELETE FROM job_queue WHERE id IN (` + source + `, ` + other + `)`, "", ""},
	})
	var lineageRows, jobs int
	if err := pool.QueryRow(context.Background(), `SELECT (SELECT count(*) FROM job_replays), (SELECT count(*) FROM job_queue)`).Scan(&lineageRows, &jobs); err != nil {
		t.Fatal(err)
	}
	if lineageRows != 0 || jobs != 1 {
		t.Fatalf("after deleting source and replay: %d lineage rows, %d jobs; want 0 and 1", lineageRows, jobs)
	}
}

func TestDeletingASourceRemovesItsLineage(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	seedJobs(t, pool)
	runCases(t, pool, []ddlCase{
		{"lineage", lineage(other, "'k'", "'r'", "1"), "", ""},
		// Deleting the source cascades to the lineage; the replay job stays.
		{"delete the source", `DELETE FROM job_queue WHERE id = ` + source, "", ""},
		{"the replay can now go", `DELETE FROM job_queue WHERE id = ` + other, "", ""},
	})
}

// A workflow step's link to its job: a step may reference only a job of
// its tenant that exists; deleting the job unlinks the step (the trigger
// that stands in for SET NULL runs before the row goes, so the RESTRICT
// check finds no step left) and keeps the step; a step referencing a job
// that is gone cannot be written.
func TestDeletingAStepsJobUnlinksTheStep(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	seedJobs(t, pool)
	const run = "'00000000-0000-0000-0000-0000000000c1'"
	runCases(t, pool, []ddlCase{
		{"a run", `INSERT INTO workflow_runs (id, workflow_type) VALUES (` + run + `, 'w')`, "", ""},
		{"a step owning a job", `INSERT INTO workflow_steps (workflow_run_id, step_key, job_id) VALUES (` + run + `, 's1', ` + other + `)`, "", ""},
		{"a step owning a missing job", `INSERT INTO workflow_steps (workflow_run_id, step_key, job_id) VALUES (` + run + `, 's2', '00000000-0000-0000-0000-0000000000ff')`,
			"23503", "fk_workflow_steps_job"},
		{"a step owning another tenant's job", `INSERT INTO workflow_steps (organization_id, workflow_run_id, step_key, job_id)
		    VALUES ('00000000-0000-0000-0000-00000000000b', ` + run + `, 's3', ` + third + `)`, "23503", "fk_workflow_steps_workflow_run"},
		{"deleting the step's job", `DELETE FROM job_queue WHERE id = ` + other, "", ""},
		{"linking the step to the deleted job again", `UPDATE workflow_steps SET job_id = ` + other + ` WHERE step_key = 's1'`, "23503", "fk_workflow_steps_job"},
	})
	var steps, linked int
	if err := pool.QueryRow(context.Background(), `SELECT count(*), count(job_id) FROM workflow_steps`).Scan(&steps, &linked); err != nil {
		t.Fatal(err)
	}
	if steps != 1 || linked != 0 {
		t.Fatalf("%d steps, %d linked; want the step kept and unlinked", steps, linked)
	}
}

func TestJobQueueChecks(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	seedJobs(t, pool)
	insert := func(cols, vals string) string {
		return `INSERT INTO job_queue (job_type, max_attempts` + cols + `) VALUES ('t', 1` + vals + `)`
	}
	runCases(t, pool, []ddlCase{
		{"run zero", insert(", run_number", ", 0"), "23514", "chk_job_queue_run_number_positive"},
		{"negative attempt", insert(", attempt", ", -1"), "23514", "chk_job_queue_attempt_nonnegative"},
		{"max_attempts zero", `INSERT INTO job_queue (job_type, max_attempts) VALUES ('t', 0)`, "23514", "chk_job_queue_max_attempts_positive"},
		{"timeout zero", insert(", timeout_seconds", ", 0"), "23514", "chk_job_queue_timeout_positive"},
		{"progress done over total", insert(", progress_done, progress_total", ", 9, 8"), "23514", "chk_job_queue_progress_nonnegative"},
		{"negative progress", insert(", progress_done", ", -1"), "23514", "chk_job_queue_progress_nonnegative"},
		{"progress 8 of 8", insert(", progress_done, progress_total", ", 8, 8"), "", ""},
		{"blank stage", insert(", stage", ", '  '"), "23514", "chk_job_queue_stage_not_blank"},
		{"blank worker", insert(", worker_id", ", ' '"), "23514", "chk_job_queue_worker_id_not_blank"},
		{"blank idempotency key", insert(", idempotency_key, enqueue_request", ", ' ', '{}'"), "23514", "chk_job_queue_idempotency_key_not_blank"},
		{"keyed job without its request", insert(", idempotency_key", ", 'k'"), "23514", "ck_job_queue_idempotency_enqueue_request"},
		{"resource key of spaces", insert(", execution_resource_key", ", E' \\t'"), "23514", "chk_job_queue_execution_resource_key"},
		{"resource key of Unicode spaces", insert(", execution_resource_key", ", U&'\\3000\\00A0'"), "23514", "chk_job_queue_execution_resource_key"},
		{"513-byte resource key", insert(", execution_resource_key", ", '"+strings.Repeat("r", 513)+"'"), "23514", "chk_job_queue_execution_resource_key"},
		{"unknown job type", `INSERT INTO job_queue (job_type, max_attempts) VALUES ('nope', 1)`, "23503", "fk_job_queue_job_type"},
		{"keyed job twice in the global scope", insert(", idempotency_key, enqueue_request", ", 'k', '{}'"), "", ""},
		{"...", insert(", idempotency_key, enqueue_request", ", 'k', '{}'"), "23505", "uq_job_queue_type_idempotency_global"},
		{"same key in an organization", insert(", idempotency_key, enqueue_request, organization_id", ", 'k', '{}', '00000000-0000-0000-0000-00000000000b'"), "", ""},
		{"...twice", insert(", idempotency_key, enqueue_request, organization_id", ", 'k', '{}', '00000000-0000-0000-0000-00000000000b'"), "23505", "uq_job_queue_type_idempotency_org"},
		{"a leased keyed job needs its resource claim",
			`UPDATE job_queue SET execution_resource_key = 'printer', status = 'LEASED', attempt = 1, worker_id = 'w' WHERE id = ` + other,
			"23514", "chk_job_queue_execution_resource_claim_required"},
	})
}

func TestProgressPercentIsDerived(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	seedJobs(t, pool)
	var pct *float64
	if err := pool.QueryRow(context.Background(), `UPDATE job_queue SET progress_done = 1, progress_total = 3 WHERE id = `+other+` RETURNING progress_pct::float8`).Scan(&pct); err != nil {
		t.Fatal(err)
	}
	if pct == nil || *pct != 33.33 {
		t.Fatalf("progress_pct %v, want 33.33", pct)
	}
}

// job_queue.updated_at is set by the statements that update a job (the
// plan audit checks each one), not by a trigger since 00014;
// job_definitions keeps its trigger.
func TestUpdatedAtSetByStatementsAndDefinitionTrigger(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	seedJobs(t, pool)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `UPDATE job_queue SET updated_at = '2000-01-01', created_at = '2000-01-01' WHERE id = `+other); err != nil {
		t.Fatal(err)
	}
	var updated time.Time
	if err := pool.QueryRow(ctx, `UPDATE job_queue SET priority = 5 WHERE id = `+other+`
	    RETURNING updated_at`).Scan(&updated); err != nil {
		t.Fatal(err)
	}
	if updated.Year() != 2000 {
		t.Fatalf("job_queue updated_at %s moved by an update that did not set it: a trigger is left", updated)
	}
	// The times come back as values and are compared here: Citus allows
	// no non-immutable function in a RETURNING clause.
	before := time.Now().Add(-time.Minute)
	if _, err := pool.Exec(ctx, `UPDATE job_definitions SET updated_at = '2000-01-01'`); err != nil {
		t.Fatal(err)
	}
	if err := pool.QueryRow(ctx, `UPDATE job_definitions SET default_priority = 1 RETURNING updated_at`).Scan(&updated); err != nil || !updated.After(before) {
		t.Fatalf("job_definitions updated_at %s not set by its trigger (%v)", updated, err)
	}
}
