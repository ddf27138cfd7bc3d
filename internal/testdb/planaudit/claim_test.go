package planaudit

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runledger-go/runledger/internal/testdb"
)

// oldClaimScan is the claim's candidate scan before it walked the
// priorities: one index scan in claim order with the due-time condition as
// a filter, which reads every job scheduled for later at a priority whose
// due jobs do not fill the batch. It is the control that shows the bound
// below tells the two apart.
const oldClaimScan = `SELECT jq.id FROM job_queue jq
WHERE jq.status = 'PENDING' AND jq.next_run_at <= now()
ORDER BY jq.priority DESC, jq.next_run_at, jq.created_at
LIMIT $1 FOR UPDATE OF jq SKIP LOCKED`

// The claim finds due jobs without reading the jobs scheduled for later:
// with 30,000 scheduled jobs at the top priority, a claim of the few due
// ones (at that priority and below it) reads a handful of pages, where a
// scan in claim order with the due time as a filter reads the whole
// scheduled backlog.
func TestClaimReadsOnlyDueJobs(t *testing.T) {
	if testdb.Citus() {
		t.Skip("the single-server claim (JobClaim); on Citus the claim goes tenant by tenant (TestCitusRouting)")
	}
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	claim := loadClaim(t)
	pool := testdb.New(t)
	for _, stmt := range []string{
		`INSERT INTO job_definitions (job_type) VALUES ('audit')`,
		`INSERT INTO job_queue (job_type, max_attempts, priority, next_run_at, stage)
		 SELECT 'audit', 3, 200, now() + interval '1 day' + n * interval '1 second', 'scheduled' FROM generate_series(1, 30000) n`,
		`INSERT INTO job_queue (job_type, max_attempts, priority, next_run_at) SELECT 'audit', 3, 200, now() - interval '1 minute' FROM generate_series(1, 2)`,
		`INSERT INTO job_queue (job_type, max_attempts, priority, next_run_at) SELECT 'audit', 3, 100, now() - interval '1 minute' FROM generate_series(1, 3)`,
		`VACUUM ANALYZE job_queue`,
	} {
		testdb.Exec(t, pool, stmt)
	}
	pages := func(sql string, args ...any) (int, float64) {
		t.Helper()
		var doc []struct {
			Plan bufNode `json:"Plan"`
		}
		if err := json.Unmarshal(explainRolledBack(t, ctx, pool, sql, args...), &doc); err != nil || len(doc) != 1 {
			t.Fatalf("decode plan: %v", err)
		}
		return doc[0].Plan.claimIndexPages(), doc[0].Plan.Rows
	}
	got, rows := pages(claim.Body(), []string{}, int32(10), "w", 30.0)
	if rows != 5 {
		t.Fatalf("the claim leased %v jobs, want the 5 due", rows)
	}
	old, _ := pages(oldClaimScan, 10)
	t.Logf("the claim read %d pages of the claim index; a scan in claim order reads %d", got, old)
	if old < 100 {
		// PostgreSQL 18's B-tree skip scan finds the due jobs of each
		// priority without reading the scheduled ones, even for the
		// control; before 18 a cheap control means the backlog is too
		// small to tell the two apart.
		if testdb.Scalar[int32](t, pool, `SELECT current_setting('server_version_num')::int`) < 180000 {
			t.Fatalf("the control scan read only %d pages: the scheduled backlog is too small to tell", old)
		}
	}
	if got > 30 {
		t.Fatalf("the claim read %d pages of the claim index with 30,000 jobs scheduled for later, want a few", got)
	}
}

// A claim of some job types reads only the jobs it leases: 100 of 5,000
// due jobs of one type behind 100,000 of another, due earlier at the same
// priority, are claimed by reading a few hundred rows, where a claim on an
// index in claim order of every type either read the other type's
// backlog first (filtered by type) or read and sorted the whole backlog
// of its own type. A claim of two types takes the first jobs of both in
// claim order (due time across the types), and a claim of every type (no
// types given) the first of the whole queue. On Citus the claim is the
// tenant's (JobClaimTenant), here of the global tenant, which holds every
// job of the test.
func TestClaimReadsOnlyItsTypes(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	queries, err := Load("../../../db")
	if err != nil {
		t.Fatal(err)
	}
	name := "JobClaim"
	if testdb.Citus() {
		name = "JobClaimTenant"
	}
	claim, ok := Get(queries, name)
	if !ok {
		t.Fatalf("no %s statement in db/", name)
	}
	args := func(types []string) []any {
		if testdb.Citus() {
			return []any{types, uuid.Nil, int32(100), "w", 30.0}
		}
		return []any{types, int32(100), "w", 30.0}
	}
	pool := testdb.New(t)
	for _, stmt := range []string{
		`INSERT INTO job_definitions (job_type) VALUES ('audit-wanted'), ('audit-backlog'), ('audit-other')`,
		`INSERT INTO job_queue (job_type, max_attempts, priority, next_run_at)
		 SELECT 'audit-backlog', 3, 100, timestamptz '2020-01-01 00:00Z' + n * interval '1 millisecond' FROM generate_series(1, 100000) n`,
		`INSERT INTO job_queue (job_type, max_attempts, priority, next_run_at)
		 SELECT 'audit-wanted', 3, 100, timestamptz '2020-01-02 00:00Z' + n * interval '1 millisecond' FROM generate_series(1, 5000) n`,
		`INSERT INTO job_queue (job_type, max_attempts, priority, next_run_at)
		 SELECT 'audit-other', 3, 100, timestamptz '2020-01-02 00:00Z' + n * interval '1 millisecond' + interval '500 microseconds' FROM generate_series(1, 1000) n`,
		`VACUUM ANALYZE job_queue`,
	} {
		testdb.Exec(t, pool, stmt)
	}
	// claimed runs the claim of 100 jobs of types in a transaction rolled
	// back and returns the rows of job_queue it read and the job types of
	// the jobs it leased, in claim order.
	claimed := func(types []string) (float64, []string) {
		t.Helper()
		read := jobRowsRead(t, explainRolledBack(t, ctx, pool, claim.Body(), args(types)...))
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = tx.Rollback(ctx) }()
		rows, err := tx.Query(ctx, claim.Body(), args(types)...)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for rows.Next() {
			vals, err := rows.Values()
			if err != nil {
				t.Fatal(err)
			}
			for i, f := range rows.FieldDescriptions() {
				if f.Name == "job_type" {
					got = append(got, vals[i].(string))
				}
			}
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return read, got
	}
	count := func(types []string, of string) int {
		n := 0
		for _, typ := range types {
			if typ == of {
				n++
			}
		}
		return n
	}

	read, got := claimed([]string{"audit-wanted"})
	t.Logf("%s: a claim of 100 jobs of one type read %.0f rows of job_queue, with 5,000 due jobs of the type behind 100,000 of another", name, read)
	if len(got) != 100 || count(got, "audit-wanted") != 100 {
		t.Fatalf("the claim of audit-wanted leased %d jobs (%d of the type), want 100 of it", len(got), count(got, "audit-wanted"))
	}
	// The jobs it leases, read twice (the share, then the lock), and a
	// few more: reading the other type's backlog, or the whole backlog of
	// its own type to sort it, is thousands.
	if read > 400 {
		t.Fatalf("the claim of 100 jobs of one type read %.0f rows of job_queue, want at most 400", read)
	}
	// Due times that alternate between the two types: the first 100 in
	// claim order are 50 of each, in turn.
	read, got = claimed([]string{"audit-wanted", "audit-other"})
	if count(got, "audit-wanted") != 50 || count(got, "audit-other") != 50 || got[0] != "audit-wanted" || got[1] != "audit-other" {
		t.Fatalf("the claim of two types leased %v, want 50 of each, alternating from audit-wanted", got)
	}
	if read > 700 {
		t.Fatalf("the claim of 100 jobs of two types read %.0f rows of job_queue, want at most 700", read)
	}
	if _, got = claimed([]string{}); len(got) != 100 || count(got, "audit-backlog") != 100 {
		t.Fatalf("the claim of every type leased %d jobs (%d of audit-backlog), want the 100 first in claim order, all audit-backlog",
			len(got), count(got, "audit-backlog"))
	}
}

// jobRowsRead sums the rows the scans of job_queue (or, on Citus, of its
// shards) in an EXPLAIN (ANALYZE, FORMAT JSON) document read: those they
// returned and those their filters removed, over every loop. It walks
// the whole document, so the remote plans of Citus's tasks count too.
func jobRowsRead(t *testing.T, raw []byte) float64 {
	t.Helper()
	var rows float64
	err := eachObject(raw, func(v map[string]any) {
		rel, _ := v["Relation Name"].(string)
		typ, _ := v["Node Type"].(string)
		if (rel == "job_queue" || strings.HasPrefix(rel, "job_queue_")) && strings.Contains(typ, "Scan") {
			returned, _ := v["Actual Rows"].(float64)
			removed, _ := v["Rows Removed by Filter"].(float64)
			loops, _ := v["Actual Loops"].(float64)
			rows += (returned + removed) * loops
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	return rows
}

// loadClaim returns the generated JobClaim statement.
func loadClaim(t *testing.T) Query {
	t.Helper()
	queries, err := Load("../../../db")
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range queries {
		if q.Name == "JobClaim" {
			return q
		}
	}
	t.Fatal("no JobClaim statement in db/")
	return Query{}
}

// explainRolledBack runs sql under EXPLAIN (ANALYZE, BUFFERS, FORMAT
// JSON) in a transaction it rolls back, and returns the document.
func explainRolledBack(t *testing.T, ctx context.Context, pool *pgxpool.Pool, sql string, args ...any) []byte {
	t.Helper()
	tx, err := pool.BeginTx(ctx, pgx.TxOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	var raw []byte
	if err := tx.QueryRow(ctx, "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) "+sql, args...).Scan(&raw); err != nil {
		t.Fatal(err)
	}
	return raw
}

// bufNode is a node of EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON).
type bufNode struct {
	Type     string    `json:"Node Type"`
	Relation string    `json:"Relation Name"`
	Index    string    `json:"Index Name"`
	Loops    float64   `json:"Actual Loops"`
	Removed  float64   `json:"Rows Removed by Filter"`
	Hit      int       `json:"Shared Hit Blocks"`
	Read     int       `json:"Shared Read Blocks"`
	Rows     float64   `json:"Actual Rows"` // PostgreSQL 18 prints it with decimals
	Plans    []bufNode `json:"Plans"`
}

// claimIndexPages sums the pages the scans of idx_job_queue_claim under n
// read: what a backlog of jobs scheduled for later would inflate (the
// writes of the lease and its events cost the same whatever the backlog).
func (n bufNode) claimIndexPages() int {
	pages := 0
	if n.Index == "idx_job_queue_claim" {
		pages = n.Hit + n.Read
	}
	for _, c := range n.Plans {
		pages += c.claimIndexPages()
	}
	return pages
}
