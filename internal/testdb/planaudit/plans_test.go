package planaudit

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runledger-go/runledger/internal/testdb"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// bigTables are the tables that grow without bound: a plan that reads one
// of them with a sequential scan gets slower with every job ever run.
var bigTables = map[string]bool{"job_queue": true, "job_events": true, "job_replays": true}

// auditJobs is how many jobs the audit database holds: enough that the
// planner prefers an index over a sequential scan wherever one exists.
const auditJobs = 50_000

// TestPlans plans every statement sqlc generated from queries/, exactly as
// the library sends it, against a database of 50,000 jobs across scopes,
// statuses and types, with their events, lineage and workflow steps and
// fresh statistics (ANALYZE), and fails if any plan reads job_queue,
// job_events or job_replays with a sequential scan. Each statement is
// prepared (PREPARE, so PostgreSQL infers its parameter types as it does
// for pgx) and explained with realistic values bound (EXPLAIN EXECUTE, which
// plans without running, so data-modifying statements change nothing),
// twice: as a custom plan for those values and as the generic plan a
// prepared statement switches to after five executions. Transaction
// control statements (BEGIN, COMMIT, ...) have no plan and are skipped.
//
// To check a new query: add it to queries/, run make generate, then
//
//	go test ./internal/testdb/planaudit -run TestPlans -v
//
// which logs each statement's plan nodes. A statement needing values the
// audit cannot guess from its parameter names gets a value by type; name
// its parameters like the existing ones (or extend auditValues) when that
// is not realistic.
func TestPlans(t *testing.T) {
	t.Parallel()
	if testdb.Citus() {
		// Citus shows the coordinator's plan, the shards' plans only inside
		// it: TestCitusRouting audits what matters there.
		t.Skip("the single-server plan audit; the Citus lane runs TestCitusRouting")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	queries, err := Load("../../../db")
	if err != nil {
		t.Fatal(err)
	}
	if len(queries) == 0 {
		t.Fatal("no generated queries found in ../../../db")
	}
	pool := testdb.New(t)
	values := seedAuditData(t, ctx, pool)

	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()

	audited := 0
	for _, q := range queries {
		if q.IsUtility() {
			t.Logf("%-40s skipped: %s has no plan", q.Name, strings.Fields(q.Body())[0])
			continue
		}
		audited++
		for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
			nodes, err := explain(ctx, conn.Conn(), q, mode, values)
			if err != nil {
				t.Errorf("%s (%s): %v", q.Name, mode, err)
				continue
			}
			var bad []string
			for _, n := range nodes {
				if n.NodeType == "Seq Scan" && bigTables[n.Relation] {
					bad = append(bad, n.Relation)
				}
			}
			if len(bad) > 0 {
				t.Errorf("%s (%s): sequential scan of %s; plan: %s", q.Name, mode, strings.Join(bad, ", "), summary(nodes))
			} else if testing.Verbose() {
				t.Logf("%-40s %-18s %s", q.Name, mode, summary(nodes))
			}
		}
	}
	if audited == 0 {
		t.Fatal("no statement audited")
	}

	// The audit itself: a lookup by an unindexed column is caught.
	unindexed := Query{Name: "Unindexed", SQL: "-- name: Unindexed :many\nSELECT id FROM job_queue WHERE worker_id = $1", Params: []string{"WorkerID"}}
	nodes, err := explain(ctx, conn.Conn(), unindexed, "force_generic_plan", values)
	if err != nil {
		t.Fatal(err)
	}
	if s := summary(nodes); !strings.Contains(s, "Seq Scan job_queue") {
		t.Fatalf("a lookup by an unindexed column planned as %s: the data is too small to tell a missing index", s)
	}
}

// planNode is what the audit reads of a node of EXPLAIN (FORMAT JSON).
type planNode struct {
	NodeType string     `json:"Node Type"`
	Relation string     `json:"Relation Name"`
	Index    string     `json:"Index Name"`
	Plans    []planNode `json:"Plans"`
}

// explain prepares q, explains it with values bound under plan_cache_mode
// mode and returns its plan nodes, flattened.
func explain(ctx context.Context, conn *pgx.Conn, q Query, mode string, values auditValues) ([]planNode, error) {
	raw, err := explainJSON(ctx, conn, q, mode, values)
	if err != nil {
		return nil, err
	}
	var doc []struct {
		Plan planNode `json:"Plan"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil || len(doc) != 1 {
		return nil, fmt.Errorf("decode plan %s: %v", raw, err)
	}
	var flat []planNode
	var walk func(n planNode)
	walk = func(n planNode) {
		flat = append(flat, n)
		for _, c := range n.Plans {
			walk(c)
		}
	}
	walk(doc[0].Plan)
	return flat, nil
}

// explainJSON prepares q and returns EXPLAIN (FORMAT JSON) of it with
// values bound under plan_cache_mode mode.
func explainJSON(ctx context.Context, conn *pgx.Conn, q Query, mode string, values auditValues) ([]byte, error) {
	if _, err := conn.Exec(ctx, "PREPARE audited AS "+q.Body()); err != nil {
		return nil, fmt.Errorf("prepare: %w", err)
	}
	defer conn.Exec(context.Background(), "DEALLOCATE audited") //nolint:errcheck
	var types []string
	if err := conn.QueryRow(ctx, `SELECT coalesce(parameter_types::text[], '{}') FROM pg_prepared_statements WHERE name = 'audited'`).Scan(&types); err != nil {
		return nil, fmt.Errorf("parameter types: %w", err)
	}
	if len(types) != len(q.Params) {
		return nil, fmt.Errorf("%d parameters prepared, %d named by the generated code", len(types), len(q.Params))
	}
	args := make([]string, len(types))
	for i, typ := range types {
		lit, err := values.literal(q.Params[i], typ)
		if err != nil {
			return nil, err
		}
		args[i] = lit
	}
	if _, err := conn.Exec(ctx, "SET plan_cache_mode = "+mode); err != nil {
		return nil, err
	}
	defer conn.Exec(context.Background(), "RESET plan_cache_mode") //nolint:errcheck
	stmt := "EXPLAIN (FORMAT JSON) EXECUTE audited"
	if len(args) > 0 {
		stmt += "(" + strings.Join(args, ", ") + ")"
	}
	var raw []byte
	if err := conn.QueryRow(ctx, stmt, pgx.QueryExecModeSimpleProtocol).Scan(&raw); err != nil {
		return nil, fmt.Errorf("%s: %w", stmt, err)
	}
	return raw, nil
}

func summary(nodes []planNode) string {
	parts := make([]string, 0, len(nodes))
	for _, n := range nodes {
		s := n.NodeType
		switch {
		case n.Index != "":
			s += " " + n.Index
		case n.Relation != "":
			s += " " + n.Relation
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, " > ")
}

// auditValues are realistic parameter values taken from the seeded data,
// as SQL literals (or expressions) by parameter name.
type auditValues map[string]string

// literal returns the value for parameter name, of PostgreSQL type typ:
// by name when the audit knows the name, else a plain value of the type.
func (v auditValues) literal(name, typ string) (string, error) {
	if lit, ok := v[strings.ToLower(name)]; ok {
		if strings.HasSuffix(typ, "[]") && !strings.HasPrefix(lit, "ARRAY") {
			// A batch statement's array of a value the audit knows as a
			// scalar.
			return "ARRAY[(" + lit + ")]::" + typ, nil
		}
		return "(" + lit + ")::" + typ, nil
	}
	switch typ {
	case "uuid":
		return v["id"] + "::uuid", nil
	case "uuid[]":
		return v["jobids"] + "::uuid[]", nil
	case "text":
		return "'audit'::text", nil
	case "text[]":
		return "ARRAY['audit']::text[]", nil
	case "integer[]", "bigint[]":
		return "ARRAY[1]::" + typ, nil
	case "boolean[]":
		return "ARRAY[false]::boolean[]", nil
	case "double precision[]":
		return "ARRAY[30]::double precision[]", nil
	case "jsonb[]":
		return "ARRAY[NULL]::jsonb[]", nil
	case "integer", "bigint", "smallint", "double precision", "numeric":
		return "1::" + typ, nil
	case "boolean":
		return "false", nil
	case "jsonb", "json":
		return "'{}'::" + typ, nil
	case "timestamp with time zone":
		return "now()", nil
	case "timestamp with time zone[]":
		return "ARRAY[now() + interval '30 seconds']::timestamptz[]", nil
	case "interval":
		return "'1 minute'::interval", nil
	}
	if strings.HasPrefix(typ, "job_") || strings.HasPrefix(typ, "workflow_") {
		return "", fmt.Errorf("no value for parameter %s of enum type %s: add one to auditValues", name, typ)
	}
	return "", fmt.Errorf("no value for parameter %s of type %s: add one to auditValues", name, typ)
}

func quote(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// seedAuditData fills the database with auditJobs jobs and what hangs off
// them, analyzes it, and returns parameter values that point into it.
func seedAuditData(t testing.TB, ctx context.Context, pool *pgxpool.Pool) auditValues {
	t.Helper()
	start := time.Now()
	for _, stmt := range []string{
		`INSERT INTO job_definitions (job_type) SELECT 'type-' || n FROM generate_series(1, 10) n`,
		// Jobs: 50 organizations and the global scope; every status; a
		// fifth keyed, a twentieth with an execution resource key; leased
		// ones with a lease and a worker.
		`INSERT INTO job_queue (id, job_type, organization_id, payload, status, priority, run_number, attempt,
		     max_attempts, next_run_at, lease_expires_at, worker_id, stage, idempotency_key, enqueue_request,
		     execution_resource_key, created_at, finished_at)
		 SELECT gen_random_uuid(),
		        'type-' || (1 + n % 10),
		        CASE WHEN n % 51 = 0 THEN '00000000-0000-0000-0000-000000000000'::uuid ELSE ('00000000-0000-4000-8000-' || lpad(to_hex(n % 51), 12, '0'))::uuid END,
		        jsonb_build_object('n', n),
		        s.status::job_status,
		        50 + n % 100,
		        1 + n % 3,
		        CASE WHEN s.status = 'PENDING' THEN 0 ELSE 1 END,
		        5,
		        now() - make_interval(secs => n % 7200) + interval '30 minutes',
		        CASE WHEN s.status = 'LEASED' THEN now() + make_interval(secs => n % 600) - interval '5 minutes' END,
		        CASE WHEN s.status = 'LEASED' THEN 'worker-' || n % 20 END,
		        CASE WHEN s.status = 'SUCCEEDED' THEN 'completed' WHEN s.status = 'LEASED' THEN 'running' ELSE 'queued' END,
		        CASE WHEN n % 5 = 0 THEN 'key-' || n END,
		        CASE WHEN n % 5 = 0 THEN '{"k":1}'::jsonb END,
		        CASE WHEN n % 20 = 0 AND s.status <> 'LEASED' THEN 'resource-' || n % 500 END,
		        now() - make_interval(secs => n),
		        CASE WHEN s.status IN ('SUCCEEDED', 'DEAD_LETTERED', 'CANCELED') THEN now() - make_interval(secs => n) + interval '1 minute' END
		 FROM generate_series(1, ` + fmt.Sprint(auditJobs) + `) n
		 CROSS JOIN LATERAL (SELECT (ARRAY['PENDING','PENDING','PENDING','LEASED','SUCCEEDED','SUCCEEDED',
		     'SUCCEEDED','SUCCEEDED','DEAD_LETTERED','CANCELED'])[1 + n % 10] AS status) s`,
		// Three events per job.
		`INSERT INTO job_events (organization_id, job_id, run_number, attempt, event_type, stage, payload, occurred_at)
		 SELECT organization_id, id, run_number, e.attempt, e.type::job_event_type, 'queued', '{}', created_at + make_interval(secs => e.n)
		 FROM job_queue
		 CROSS JOIN (VALUES (1, NULL::int, 'ENQUEUED'), (2, 1, 'LEASED'), (3, 1, 'HEARTBEAT')) AS e(n, attempt, type)`,
		`ANALYZE job_queue`,
		// Lineage: about half of the succeeded jobs were replayed, by a
		// pending job of the same scope.
		`WITH sources AS (
		     SELECT id, run_number, organization_id AS scope,
		            row_number() OVER (ORDER BY id) AS r
		     FROM job_queue WHERE status = 'SUCCEEDED'),
		 replays AS (
		     SELECT id, organization_id AS scope,
		            row_number() OVER (PARTITION BY organization_id ORDER BY id) AS k
		     FROM job_queue WHERE status = 'PENDING' AND idempotency_key IS NULL),
		 pairs AS (
		     SELECT s.scope, s.id AS source_id, s.run_number, rp.id AS replay_id
		     FROM (SELECT *, row_number() OVER (PARTITION BY scope ORDER BY id) AS k FROM sources WHERE r % 2 = 0) s
		     JOIN replays rp ON rp.scope = s.scope AND rp.k = s.k)
		 INSERT INTO job_replays (organization_id, source_job_id, source_run_number, replay_request_key, replay_job_id, reason)
		 SELECT scope, source_id, run_number, 'replay-' || replay_id, replay_id, 'audit' FROM pairs`,
		`ANALYZE job_replays`,
		// Workflows owning some pending jobs.
		`INSERT INTO workflow_runs (id, workflow_type) SELECT ('00000000-0000-4000-9000-' || lpad(to_hex(n), 12, '0'))::uuid, 'wf' FROM generate_series(1, 1000) n`,
		// (Global-scope runs, owning global jobs.)
		`INSERT INTO workflow_steps (workflow_run_id, step_key, job_id)
		 SELECT ('00000000-0000-4000-9000-' || lpad(to_hex(1 + r % 1000), 12, '0'))::uuid, 'step-' || r, id
		 FROM (SELECT id, row_number() OVER (ORDER BY id) AS r FROM job_queue
		       WHERE status = 'PENDING' AND organization_id = '00000000-0000-0000-0000-000000000000'
		         AND NOT EXISTS (SELECT 1 FROM job_replays jr
		                         WHERE jr.organization_id = job_queue.organization_id AND jr.replay_job_id = job_queue.id)) j
		 WHERE r % 2 = 0`,
		`INSERT INTO job_execution_resource_claims (organization_id, resource_key, job_id, run_number, attempt, worker_id, lease_expires_at, release_after)
		 SELECT organization_id, execution_resource_key, id, run_number, 1, 'worker-1', now() + interval '1 minute',
		        CASE WHEN r % 2 = 0 THEN now() - interval '1 minute' END
		 FROM (SELECT DISTINCT ON (organization_id, execution_resource_key) organization_id, id, run_number, execution_resource_key,
		              row_number() OVER (ORDER BY id) AS r
		       FROM job_queue WHERE execution_resource_key IS NOT NULL ORDER BY organization_id, execution_resource_key, id) k`,
		// VACUUM too, as autovacuum would: index-only scans count the
		// visibility map.
		`VACUUM ANALYZE`,
	} {
		if _, err := pool.Exec(ctx, stmt); err != nil {
			t.Fatalf("seed: %v\n%s", err, stmt)
		}
	}

	var (
		sourceID, replayID, pendingID uuid.UUID
		org                           uuid.UUID
		run                           int32
		key, reason, jobType          string
		idemKey                       string
		jobIDs                        []uuid.UUID
		succeededIDs                  []uuid.UUID
	)
	if err := pool.QueryRow(ctx, `
		SELECT jr.source_job_id, jr.replay_job_id, s.organization_id, jr.source_run_number, jr.replay_request_key, jr.reason, s.job_type
		FROM job_replays jr JOIN job_queue s ON s.organization_id = jr.organization_id AND s.id = jr.source_job_id
		WHERE s.organization_id <> '00000000-0000-0000-0000-000000000000' ORDER BY jr.source_job_id LIMIT 1`).
		Scan(&sourceID, &replayID, &org, &run, &key, &reason, &jobType); err != nil {
		t.Fatalf("pick lineage: %v", err)
	}
	if err := pool.QueryRow(ctx, `
		SELECT idempotency_key FROM job_queue
		WHERE idempotency_key IS NOT NULL AND organization_id <> '00000000-0000-0000-0000-000000000000' ORDER BY id LIMIT 1`).
		Scan(&idemKey); err != nil {
		t.Fatalf("pick keyed job: %v", err)
	}
	if err := pool.QueryRow(ctx, `SELECT id FROM job_queue WHERE status = 'PENDING' ORDER BY id LIMIT 1`).Scan(&pendingID); err != nil {
		t.Fatal(err)
	}
	if err := pool.QueryRow(ctx, `SELECT array_agg(id) FROM (SELECT id FROM job_queue WHERE status = 'PENDING' ORDER BY id LIMIT 10) j`).Scan(&jobIDs); err != nil {
		t.Fatal(err)
	}
	// A chunk of a bulk replay: succeeded jobs of the lineage's scope.
	if err := pool.QueryRow(ctx, `SELECT array_agg(id) FROM (SELECT id FROM job_queue WHERE status = 'SUCCEEDED' AND organization_id = $1 ORDER BY id LIMIT 100) j`, org).Scan(&succeededIDs); err != nil {
		t.Fatal(err)
	}
	var counts [3]int64
	if err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM job_queue), (SELECT count(*) FROM job_events), (SELECT count(*) FROM job_replays)`).
		Scan(&counts[0], &counts[1], &counts[2]); err != nil {
		t.Fatal(err)
	}
	t.Logf("audit data: %d jobs, %d events, %d lineage rows (seeded and analyzed in %s)",
		counts[0], counts[1], counts[2], time.Since(start).Round(time.Millisecond))

	v := auditValues{
		"id":                   quote(sourceID.String()),
		"jobid":                quote(sourceID.String()),
		"sourcejobid":          quote(sourceID.String()),
		"replayjobid":          quote(replayID.String()),
		"organizationid":       quote(org.String()),
		"sourcerunnumber":      fmt.Sprint(run),
		"expectedrunnumber":    fmt.Sprint(run),
		"runnumber":            fmt.Sprint(run),
		"attempt":              "1",
		"replayrequestkey":     quote(key),
		"reason":               quote(reason),
		"locktoken":            quote("audit"),
		"jobtype":              quote(jobType),
		"jobtypes":             "ARRAY[" + quote(jobType) + "]",
		"status":               quote("PENDING"),
		"eventtype":            quote("ENQUEUED"),
		"since":                "now() - interval '1 hour'",
		"beforecreatedat":      "now() - interval '1 hour'",
		"beforeid":             quote(pendingID.String()),
		"maxjobs":              "50",
		"maxevents":            "50",
		"workerid":             quote("worker-1"),
		"leaseseconds":         "30",
		"idempotencykey":       quote(idemKey),
		"enqueuerequest":       quote(`{"k":1}`),
		"workflowrunid":        quote("00000000-0000-4000-9000-000000000001"),
		"workflowtype":         quote("wf"),
		"stepkey":              quote("step-new"),
		"executionkind":        quote("JOB"),
		"payload":              quote(`{"n":1}`),
		"output":               quote(`{"ok":true}`),
		"retrydelayseconds":    "10",
		"errorcode":            quote("E"),
		"errormessage":         quote("failed"),
		"terminal":             "false",
		"nextrunat":            "now()",
		"executionresourcekey": quote("resource-1"),
		// Compare-and-requeue: a dead-lettered job's observed state.
		"expectedstatus":   quote("DEAD_LETTERED"),
		"expectedstatuses": "ARRAY['DEAD_LETTERED']",
		"resetprogress":    "false",
		"statepolicy":      quote("preserve_progress_and_checkpoint"),
	}
	quoted := make([]string, len(jobIDs))
	for i, id := range jobIDs {
		quoted[i] = quote(id.String())
	}
	v["jobids"] = "ARRAY[" + strings.Join(quoted, ", ") + "]"
	// A bulk replay's chunk: its sources with their runs, the new replay
	// ids, and a filter's window and cursor.
	quoted = quoted[:0]
	runs := make([]string, len(succeededIDs))
	fresh := make([]string, len(succeededIDs))
	for i, id := range succeededIDs {
		quoted = append(quoted, quote(id.String()))
		runs[i] = fmt.Sprint(run)
		fresh[i] = quote(uuid.Must(uuid.NewV7()).String())
	}
	v["sourcejobids"] = "ARRAY[" + strings.Join(quoted, ", ") + "]"
	v["ids"] = v["sourcejobids"]
	v["sourcerunnumbers"] = "ARRAY[" + strings.Join(runs, ", ") + "]"
	v["replayjobids"] = "ARRAY[" + strings.Join(fresh, ", ") + "]"
	v["until"] = "now()"
	v["afterfinishedat"] = "now() - interval '30 minutes'"
	v["afterid"] = quote(sourceID.String())
	// Queue health and retention: the stats window, a prune's cutoff,
	// statuses, batch and a batch's families.
	v["windowseconds"] = "3600"
	v["cutoff"] = "now() - interval '13 hours'"
	v["statuses"] = "ARRAY['SUCCEEDED', 'DEAD_LETTERED', 'CANCELED']"
	v["batchsize"] = "1000"
	v["families"] = v["jobids"]
	return v
}
