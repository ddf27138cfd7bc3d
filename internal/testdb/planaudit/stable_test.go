package planaudit

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/health"
	"github.com/runledger-go/runledger/inspect"
	"github.com/runledger-go/runledger/internal/testdb"
	"github.com/runledger-go/runledger/jobs"
	"github.com/runledger-go/runledger/lease"
	"github.com/runledger-go/runledger/replay"
	"github.com/runledger-go/runledger/requeue"
)

// The sizes of TestHotPlansStayBounded. A hot statement works on a batch
// of at most a few hundred jobs; the queue, the leases and the history
// beside it are each larger than maxRowsRead, so a plan that reads any of
// them whole cannot pass.
const (
	staleQueueJobs    = 100_000
	staleLeasedJobs   = 10_000
	maxRowsRead       = 3_000
	historyEnv        = "RUNLEDGER_PLANAUDIT_HISTORY"
	defaultHistory    = 200_000
	shortHistory      = 20_000
	prunedOfHistory   = 1_000
	auditedTenantHex  = "00000000-0000-4000-8000-00000000a0d1"
	newcomerTenantHex = "00000000-0000-4000-8000-00000000a0d2"
	newcomerJobs      = 10_000
)

// TestHotPlansStayBounded runs every hot operation of the ledger through
// the library, as an application and its workers do, with auto_explain
// reporting each statement's executed plan (EXPLAIN ANALYZE, nested
// statements such as foreign-key checks included), and fails when any
// statement read more than maxRowsRead rows of any table: rows returned by
// its scans plus rows its filters removed, times loops. It does so three
// times, the first two with custom and with generic plans:
//
//   - under stale statistics: ANALYZE ran on the empty tables, then
//     100,000 jobs of one tenant were enqueued in bulk and 10,000 of them
//     claimed, with autovacuum off, so the planner still believes the
//     tables are empty (the hazard that once made every completion read
//     each LEASED row of the tenant);
//   - beside a history of finished jobs (RUNLEDGER_PLANAUDIT_HISTORY,
//     default 200,000; 20,000 with -short), one in twenty replayed (its
//     lineage row kept), freshly analyzed, where the prune's batches and
//     the stats must not read the history either;
//   - for a second tenant whose jobs arrived after the last ANALYZE, so
//     that the planner takes it for a tenant of no rows.
//
// Stats count the live queue by design (TestStatsCostFollowsLiveQueue), so
// they are audited only against the history.
func TestHotPlansStayBounded(t *testing.T) {
	t.Parallel()
	if testdb.Citus() {
		t.Skip("the single-server plans; the Citus lane runs TestCitusRouting")
	}
	history := defaultHistory
	if testing.Short() {
		history = shortHistory
	}
	if v := os.Getenv(historyEnv); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < prunedOfHistory*2 {
			t.Fatalf("%s=%q: want a number of at least %d", historyEnv, v, prunedOfHistory*2)
		}
		history = n
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()

	url := testdb.NewURL(t)
	setup := testdb.OpenPool(t, url, 4, nil)
	rec := &planRecorder{}
	audited := explainedPool(t, ctx, url, rec, false)
	// A worker runs the same statements for hours on one connection, so
	// it gets the generic plan of each (pgx prepares them, and after five
	// runs the server may keep a plan made without the parameters' values).
	generic := explainedPool(t, ctx, url, rec, true)

	// Statistics of the empty tables, kept: autovacuum would analyze the
	// tables after the insert and hide the hazard.
	for _, stmt := range []string{
		`DO $$ DECLARE r record; BEGIN
		   FOR r IN SELECT tablename FROM pg_tables WHERE schemaname = current_schema() LOOP
		     EXECUTE format('ALTER TABLE %I SET (autovacuum_enabled = off)', r.tablename);
		   END LOOP; END $$`,
		`ANALYZE`,
	} {
		if _, err := setup.Exec(ctx, stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	tenant := runledger.Organization(uuid.MustParse(auditedTenantHex))
	const jobType = "audit-hot"
	if _, err := jobs.UpsertDefinition(ctx, setup, jobs.DefinitionInput{JobType: jobType, MaxAttempts: testdb.Ptr(int32(3))}); err != nil {
		t.Fatal(err)
	}
	enqueueBulk(t, ctx, setup, tenant, jobType, staleQueueJobs)
	for claimed := 0; claimed < staleLeasedJobs; claimed += runledger.MaxLimit {
		if _, err := lease.Claim(ctx, setup, lease.ClaimRequest{WorkerID: "holder", Limit: runledger.MaxLimit, Lease: time.Hour}); err != nil {
			t.Fatal(err)
		}
	}

	rec.start()
	runHotOperations(t, ctx, audited, tenant, jobType, "stale")
	checkPlans(t, rec.stop(), "stale statistics", nil)
	rec.start()
	runHotOperations(t, ctx, generic, tenant, jobType, "stale-generic")
	checkPlans(t, rec.stop(), "stale statistics, generic plans", nil)

	// The history: finished jobs of the same tenant with their events,
	// finished a month and more ago (the oldest prunedOfHistory of them
	// before the prune's cutoff), then fresh statistics.
	var now time.Time
	if err := setup.QueryRow(ctx, `SELECT now()`).Scan(&now); err != nil {
		t.Fatal(err)
	}
	base := now.Add(-30 * 24 * time.Hour)
	for _, stmt := range []string{
		`INSERT INTO job_queue (id, job_type, organization_id, payload, status, priority, run_number, attempt,
		     max_attempts, next_run_at, stage, created_at, finished_at, output)
		 SELECT gen_random_uuid(), $1, $2, '{}', 'SUCCEEDED', 100, 1, 1, 3,
		        $3::timestamptz - make_interval(secs => n), 'completed',
		        $3::timestamptz - make_interval(secs => n + 1), $3::timestamptz - make_interval(secs => n), '{}'
		 FROM generate_series(1, $4::int) n`,
		`INSERT INTO job_events (organization_id, job_id, run_number, attempt, event_type, stage, payload, occurred_at)
		 SELECT organization_id, id, 1, e.attempt, e.type::job_event_type, 'completed', '{}', finished_at
		 FROM job_queue
		 CROSS JOIN (VALUES (NULL::int, 'ENQUEUED'), (1, 'LEASED'), (1, 'SUCCEEDED')) AS e(attempt, type)
		 WHERE finished_at < $1`,
		// Lineage in the history too: one job in twenty was replayed (its
		// replay the job that finished next before it), so that the
		// statistics know job_replays as the large table it becomes, and
		// the prune's walk of each family reads its index.
		`WITH h AS (SELECT organization_id, id, row_number() OVER (ORDER BY finished_at DESC, id) AS n
		           FROM job_queue WHERE finished_at < $1)
		 INSERT INTO job_replays (organization_id, source_job_id, source_run_number, replay_request_key, replay_job_id, reason)
		 SELECT s.organization_id, s.id, 1, 'history-' || s.n, r.id, 'history'
		 FROM h s JOIN h r ON r.n = s.n + 1
		 WHERE s.n % 20 = 1`,
		`VACUUM ANALYZE`,
	} {
		var args []any
		switch {
		case strings.HasPrefix(strings.TrimSpace(stmt), "INSERT INTO job_queue"):
			args = []any{jobType, tenant.OrganizationIDPtr(), base, history}
		case strings.HasPrefix(strings.TrimSpace(stmt), "INSERT INTO job_events"), strings.HasPrefix(strings.TrimSpace(stmt), "WITH h AS"):
			args = []any{base}
		}
		if _, err := setup.Exec(ctx, stmt, args...); err != nil {
			t.Fatalf("history: %v\n%s", err, stmt)
		}
	}

	rec.start()
	runHotOperations(t, ctx, generic, tenant, jobType, "history-generic")
	checkPlans(t, rec.stop(), fmt.Sprintf("a history of %d finished jobs, generic plans", history), nil)
	rec.start()
	runHotOperations(t, ctx, audited, tenant, jobType, "history")
	if _, err := health.GetStats(ctx, audited, health.StatsRequest{Scope: &tenant, Window: time.Hour}); err != nil {
		t.Fatal(err)
	}
	cutoff := base.Add(-time.Duration(history-prunedOfHistory) * time.Second)
	pruned, err := health.Prune(ctx, audited, health.PruneRequest{Scope: &tenant, FinishedBefore: cutoff, BatchSize: 200})
	if err != nil {
		t.Fatal(err)
	}
	if pruned.DeletedJobs < prunedOfHistory-1 {
		t.Fatalf("the prune deleted %d jobs, want about %d: the audit would not have seen its batches", pruned.DeletedJobs, prunedOfHistory)
	}
	checkPlans(t, rec.stop(), fmt.Sprintf("a history of %d finished jobs", history), []string{"stats"})

	// A tenant the statistics do not know: its jobs and events arrive
	// after the last ANALYZE, so the planner takes it for a tenant of no
	// rows, and a join with a batch may then read the whole tenant
	// through job_queue's key prefix.
	newcomer := runledger.Organization(uuid.MustParse(newcomerTenantHex))
	// Its type's jobs come before the audited tenant's backlog in the
	// claim order, so that the claims of runHotOperations take them.
	const newcomerType = "audit-newcomer"
	if _, err := jobs.UpsertDefinition(ctx, setup, jobs.DefinitionInput{JobType: newcomerType, MaxAttempts: testdb.Ptr(int32(3)),
		Priority: testdb.Ptr(int32(1000))}); err != nil {
		t.Fatal(err)
	}
	enqueueBulk(t, ctx, setup, newcomer, newcomerType, newcomerJobs)
	rec.start()
	runHotOperations(t, ctx, audited, newcomer, newcomerType, "newcomer")
	checkPlans(t, rec.stop(), fmt.Sprintf("a tenant of %d jobs the statistics do not know", newcomerJobs), nil)
	rec.start()
	runHotOperations(t, ctx, generic, newcomer, newcomerType, "newcomer-generic")
	checkPlans(t, rec.stop(), fmt.Sprintf("a tenant of %d jobs the statistics do not know, generic plans", newcomerJobs), nil)
}

// enqueueBulk enqueues n jobs of jobType in tenant, in the largest batches
// EnqueueMany takes.
func enqueueBulk(t *testing.T, ctx context.Context, pool *pgxpool.Pool, tenant runledger.Scope, jobType string, n int) {
	t.Helper()
	for done := 0; done < n; {
		size := min(jobs.MaxEnqueueMany, n-done)
		reqs := make([]jobs.EnqueueRequest, size)
		for i := range reqs {
			reqs[i] = jobs.EnqueueRequest{Scope: tenant, JobType: jobType}
		}
		results, err := jobs.EnqueueMany(ctx, pool, reqs)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range results {
			if r.Err != nil {
				t.Fatal(r.Err)
			}
		}
		done += size
	}
}

// runHotOperations drives every hot operation once through pool, a
// worker's batch where the worker batches: enqueue (single and bulk),
// claim, heartbeat, complete, fail with a retry and to the dead letter,
// release, cancel, recovery of expired leases, replay of succeeded jobs
// and requeue of dead-lettered ones (one, then a list of each). Listings
// are not on the hot path: TestPlans audits them.
func runHotOperations(t *testing.T, ctx context.Context, pool *pgxpool.Pool, tenant runledger.Scope, jobType, round string) {
	t.Helper()
	if _, err := jobs.Enqueue(ctx, pool, jobs.EnqueueRequest{Scope: tenant, JobType: jobType, IdempotencyKey: "key-" + round}); err != nil {
		t.Fatal(err)
	}
	enqueueBulk(t, ctx, pool, tenant, jobType, 200)

	// The claim names its type, as a worker claims its registered types.
	claimed, err := lease.Claim(ctx, pool, lease.ClaimRequest{WorkerID: "audited-" + round, JobTypes: []string{jobType}, Limit: 200, Lease: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if len(claimed) != 200 {
		t.Fatalf("claimed %d jobs, want 200", len(claimed))
	}
	var beats []lease.HeartbeatRequest
	var completes []lease.CompleteRequest
	for _, j := range claimed[:100] {
		beats = append(beats, lease.HeartbeatRequest{JobID: j.ID, RunNumber: j.RunNumber, Attempt: j.Attempt, WorkerID: *j.WorkerID, Lease: time.Hour})
		completes = append(completes, testdb.CompleteRequest(j))
	}
	r1, err1 := lease.HeartbeatMany(ctx, pool, beats)
	mustAll(t, r1, err1)
	r2, err2 := lease.CompleteMany(ctx, pool, completes)
	mustAll(t, r2, err2)
	var retries, dead []lease.FailRequest
	for _, j := range claimed[100:150] {
		retries = append(retries, testdb.FailRequest(j))
	}
	for _, j := range claimed[150:160] {
		f := testdb.FailRequest(j)
		f.Terminal = true
		dead = append(dead, f)
	}
	r3, err3 := lease.FailMany(ctx, pool, retries)
	mustAll(t, r3, err3)
	r4, err4 := lease.FailMany(ctx, pool, dead)
	mustAll(t, r4, err4)
	var releases []lease.ReleaseRequest
	for _, j := range claimed[160:200] {
		releases = append(releases, lease.ReleaseRequest{JobID: j.ID, RunNumber: j.RunNumber, Attempt: j.Attempt, WorkerID: *j.WorkerID})
	}
	r5, err5 := lease.Release(ctx, pool, releases)
	mustAll(t, r5, err5)

	pending, err := jobs.Enqueue(ctx, pool, jobs.EnqueueRequest{Scope: tenant, JobType: jobType})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := jobs.Cancel(ctx, pool, jobs.CancelRequest{Scope: tenant, JobID: pending.Job.ID, Reason: "audit"}); err != nil {
		t.Fatal(err)
	}

	// Leases that end at once, for the recovery to take back.
	if _, err := lease.Claim(ctx, pool, lease.ClaimRequest{WorkerID: "expiring-" + round, Limit: 100, Lease: time.Microsecond}); err != nil {
		t.Fatal(err)
	}
	recovered, err := lease.RecoverExpiredLeases(ctx, pool, 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(recovered) != 100 {
		t.Fatalf("recovered %d expired leases, want 100", len(recovered))
	}

	src := completes[0]
	out, err := replay.SucceededJob(ctx, pool, replay.Request{Scope: tenant, SourceJobID: src.JobID, ExpectedRunNumber: src.RunNumber,
		Key: "audit-" + round, Reason: "audit"})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := out.(replay.Replayed); !ok {
		t.Fatalf("replay: %#v, want Replayed", out)
	}
	var replaySources []replay.Source
	for _, c := range completes[1:11] {
		replaySources = append(replaySources, replay.Source{JobID: c.JobID, ExpectedRunNumber: c.RunNumber})
	}
	replayed, err := replay.Bulk(ctx, pool, replay.BulkRequest{Scope: tenant, Key: "audit-bulk-" + round, Reason: "audit",
		Sources: replaySources}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if replayed.Inserted != len(replaySources) {
		t.Fatalf("bulk replay: %+v, want %d inserted", replayed, len(replaySources))
	}
	deadJob, err := inspect.Get(ctx, pool, tenant, dead[0].JobID)
	if err != nil {
		t.Fatal(err)
	}
	req, err := requeue.FromJob(deadJob, requeue.PreserveProgress, "audit")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := requeue.Job(ctx, pool, req); err != nil {
		t.Fatal(err)
	}
	// The same request again finds its own requeue: the statement's second
	// branch reads the job's events for the run it requeued.
	again, err := requeue.Job(ctx, pool, req)
	if err != nil {
		t.Fatal(err)
	}
	if r, ok := again.(requeue.Requeued); !ok || r.Disposition != runledger.DispositionExisting {
		t.Fatalf("requeue again: %#v, want Requeued, existing", again)
	}
	var sources []requeue.Source
	for _, f := range dead[1:] {
		sources = append(sources, requeue.Source{JobID: f.JobID, ExpectedStatus: requeue.DeadLettered, ExpectedRunNumber: f.RunNumber})
	}
	summary, err := requeue.Bulk(ctx, pool, requeue.BulkRequest{Scope: tenant, Reason: "audit", Sources: sources}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if summary.Requeued != len(sources) {
		t.Fatalf("bulk requeue: %+v, want %d requeued", summary, len(sources))
	}
}

func mustAll[T any](t *testing.T, results []lease.Result[T], err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range results {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
	}
}

// explainedPool opens a one-connection pool on url whose session reports
// the executed plan of every statement, nested ones included, as a NOTICE
// that rec keeps while recording; with generic, every statement is
// planned without its parameters' values (plan_cache_mode).
func explainedPool(t *testing.T, ctx context.Context, url string, rec *planRecorder, generic bool) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 1
	cfg.ConnConfig.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) { rec.notice(n.Message) }
	cfg.AfterConnect = func(ctx context.Context, conn *pgx.Conn) error {
		for _, s := range []string{
			`LOAD 'auto_explain'`,
			`SET auto_explain.log_min_duration = 0`,
			`SET auto_explain.log_analyze = on`,
			`SET auto_explain.log_timing = off`,
			`SET auto_explain.log_nested_statements = on`,
			`SET auto_explain.log_format = json`,
			`SET auto_explain.log_level = notice`,
			map[bool]string{true: `SET plan_cache_mode = force_generic_plan`, false: `SET plan_cache_mode = auto`}[generic],
		} {
			if _, err := conn.Exec(ctx, s); err != nil {
				return fmt.Errorf("%s: %w", s, err)
			}
		}
		return nil
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// planRecorder keeps the plans auto_explain reports while it records.
type planRecorder struct {
	on    atomic.Bool
	mu    sync.Mutex
	plans []string
}

func (r *planRecorder) start() {
	r.mu.Lock()
	r.plans = nil
	r.mu.Unlock()
	r.on.Store(true)
}

func (r *planRecorder) stop() []string {
	r.on.Store(false)
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.plans
}

func (r *planRecorder) notice(msg string) {
	if !r.on.Load() {
		return
	}
	if i := strings.IndexByte(msg, '{'); i >= 0 && strings.HasPrefix(msg, "duration:") {
		r.mu.Lock()
		r.plans = append(r.plans, msg[i:])
		r.mu.Unlock()
	}
}

// executedNode is what the audit reads of a node of an executed plan.
type executedNode struct {
	NodeType       string         `json:"Node Type"`
	Relation       string         `json:"Relation Name"`
	Index          string         `json:"Index Name"`
	CTE            string         `json:"CTE Name"`
	ActualRows     float64        `json:"Actual Rows"`
	ActualLoops    float64        `json:"Actual Loops"`
	RemovedFilter  float64        `json:"Rows Removed by Filter"`
	RemovedRecheck float64        `json:"Rows Removed by Index Recheck"`
	RemovedJoin    float64        `json:"Rows Removed by Join Filter"`
	Plans          []executedNode `json:"Plans"`
}

// rowsRead is how many rows of each relation the plan's scans read. A
// CTE read again for every row of a join counts as rows read of the CTE
// (its name), and the pairs a join's filter refused count as rows read of
// "join filter": a nested loop that pairs every row of a batch with every
// other (a join misestimated at one row) reads no table in proportion to
// the queue, but does work in proportion to the batch squared.
func (n executedNode) rowsRead(into map[string]float64) {
	if n.Relation != "" {
		into[n.Relation] += (n.ActualRows + n.RemovedFilter + n.RemovedRecheck) * n.ActualLoops
	}
	if n.CTE != "" {
		into["CTE "+n.CTE] += (n.ActualRows + n.RemovedFilter) * n.ActualLoops
	}
	into["join filter"] += n.RemovedJoin * n.ActualLoops
	for _, c := range n.Plans {
		c.rowsRead(into)
	}
}

// checkPlans fails for every recorded statement that read more than
// maxRowsRead rows of one relation, except statements whose text contains
// one of the exempt markers' queries (named by sqlc: "-- name: X").
func checkPlans(t *testing.T, plans []string, when string, exemptNames []string) {
	t.Helper()
	if len(plans) == 0 {
		t.Fatalf("%s: auto_explain reported no plan", when)
	}
	worst := map[string]float64{}
	for _, raw := range plans {
		var entry struct {
			Query string       `json:"Query Text"`
			Plan  executedNode `json:"Plan"`
		}
		if err := json.Unmarshal([]byte(raw), &entry); err != nil {
			t.Fatalf("%s: reading a plan: %v\n%s", when, err, raw)
		}
		name := statementName(entry.Query)
		if exempt(name, exemptNames) {
			continue
		}
		read := map[string]float64{}
		entry.Plan.rowsRead(read)
		for rel, rows := range read {
			if rows > worst[name] {
				worst[name] = rows
			}
			if rows > maxRowsRead {
				t.Errorf("%s: %s read %.0f rows of %s (at most %d): %s", when, name, rows, rel, maxRowsRead, planShape(entry.Plan))
			}
		}
	}
	if testing.Verbose() {
		names := make([]string, 0, len(worst))
		for n := range worst {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			t.Logf("%s: %-45s at most %6.0f rows of one relation", when, n, worst[n])
		}
	}
}

// statementName is the sqlc name of a statement ("-- name: X :one"), or
// its first line for a statement sqlc did not generate (a foreign-key
// check, a transaction's own SET).
func statementName(q string) string {
	q = strings.TrimSpace(q)
	if i := strings.Index(q, "-- name: "); i >= 0 {
		rest := q[i+len("-- name: "):]
		if f := strings.Fields(rest); len(f) > 0 {
			return f[0]
		}
	}
	if i := strings.IndexByte(q, '\n'); i >= 0 {
		q = q[:i]
	}
	if len(q) > 60 {
		q = q[:60]
	}
	return q
}

func exempt(name string, markers []string) bool {
	for _, m := range markers {
		if strings.Contains(strings.ToLower(name), m) {
			return true
		}
	}
	return false
}

// planShape is the plan's scans in one line, for a failure message.
func planShape(n executedNode) string {
	var parts []string
	var walk func(executedNode)
	walk = func(n executedNode) {
		s := n.NodeType
		if n.Relation != "" {
			s += " " + n.Relation
		}
		if n.Index != "" {
			s += " using " + n.Index
		}
		if n.Relation != "" {
			s += fmt.Sprintf(" (rows %.0f, removed %.0f, loops %.0f)", n.ActualRows, n.RemovedFilter+n.RemovedRecheck, n.ActualLoops)
		}
		parts = append(parts, s)
		for _, c := range n.Plans {
			walk(c)
		}
	}
	walk(n)
	return strings.Join(parts, " > ")
}
