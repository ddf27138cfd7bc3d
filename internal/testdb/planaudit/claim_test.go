package planaudit

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

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
	queries, err := Load("../../../db")
	if err != nil {
		t.Fatal(err)
	}
	var claim Query
	for _, q := range queries {
		if q.Name == "JobClaim" {
			claim = q
		}
	}
	if claim.Name == "" {
		t.Fatal("no JobClaim statement in db/")
	}
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
		tx, err := pool.BeginTx(ctx, pgx.TxOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = tx.Rollback(ctx) }()
		var raw []byte
		if err := tx.QueryRow(ctx, "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) "+sql, args...).Scan(&raw); err != nil {
			t.Fatal(err)
		}
		var doc []struct {
			Plan bufNode `json:"Plan"`
		}
		if err := json.Unmarshal(raw, &doc); err != nil || len(doc) != 1 {
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
		t.Fatalf("the control scan read only %d pages: the scheduled backlog is too small to tell", old)
	}
	if got > 30 {
		t.Fatalf("the claim read %d pages of the claim index with 30,000 jobs scheduled for later, want a few", got)
	}
}

// bufNode is a node of EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON).
type bufNode struct {
	Type  string    `json:"Node Type"`
	Index string    `json:"Index Name"`
	Hit   int       `json:"Shared Hit Blocks"`
	Read  int       `json:"Shared Read Blocks"`
	Rows  float64   `json:"Actual Rows"` // PostgreSQL 18 prints it with decimals
	Plans []bufNode `json:"Plans"`
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
