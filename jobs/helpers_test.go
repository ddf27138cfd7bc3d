package jobs_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/internal/testdb"
	"github.com/runledger-go/runledger/jobs"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// testCtx returns a context that bounds one test, so a statement that
// waits when it should not fails the test instead of hanging it.
func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// setup returns a fresh migrated database with job type "email" defined
// (defaults: 8 attempts, 900 s, priority 100, enabled).
func setup(t *testing.T) (context.Context, *pgxpool.Pool) {
	t.Helper()
	pool := testdb.New(t)
	ctx := testCtx(t)
	define(t, ctx, pool, jobs.DefinitionInput{JobType: "email"})
	return ctx, pool
}

func define(t *testing.T, ctx context.Context, pool *pgxpool.Pool, in jobs.DefinitionInput) jobs.Definition {
	t.Helper()
	d, err := jobs.UpsertDefinition(ctx, pool, in)
	if err != nil {
		t.Fatalf("UpsertDefinition(%s): %v", in.JobType, err)
	}
	return d
}

func i32(v int32) *int32 { return &v }
func i64(v int64) *int64 { return &v }

func ptr[T any](v T) *T { return &v }

func enqueue(t *testing.T, ctx context.Context, pool *pgxpool.Pool, req jobs.EnqueueRequest) runledger.Job {
	t.Helper()
	if req.JobType == "" {
		req.JobType = "email"
	}
	res, err := jobs.Enqueue(ctx, pool, req)
	if err != nil {
		t.Fatalf("Enqueue: %v", err)
	}
	if res.Disposition != jobs.DispositionInserted {
		t.Fatalf("Enqueue disposition = %s, want inserted", res.Disposition)
	}
	return res.Job
}

func claim(t *testing.T, ctx context.Context, pool *pgxpool.Pool, req jobs.ClaimRequest) []runledger.Job {
	t.Helper()
	if req.WorkerID == "" {
		req.WorkerID = "worker-1"
	}
	if req.Limit == 0 {
		req.Limit = 10
	}
	if req.Lease == 0 {
		req.Lease = 30 * time.Second
	}
	got, err := jobs.Claim(ctx, pool, req)
	if err != nil {
		t.Fatalf("Claim: %v", err)
	}
	return got
}

// claimOnly claims with limit 10 and fails unless exactly the job want is
// leased.
func claimOnly(t *testing.T, ctx context.Context, pool *pgxpool.Pool, want uuid.UUID) runledger.Job {
	t.Helper()
	got := claim(t, ctx, pool, jobs.ClaimRequest{})
	if len(got) != 1 || got[0].ID != want {
		t.Fatalf("claimed %v, want only %s", ids(got), want)
	}
	return got[0]
}

func completeReq(j runledger.Job) jobs.CompleteRequest {
	return jobs.CompleteRequest{JobID: j.ID, RunNumber: j.RunNumber, Attempt: j.Attempt, WorkerID: *j.WorkerID}
}

func failReq(j runledger.Job) jobs.FailRequest {
	return jobs.FailRequest{JobID: j.ID, RunNumber: j.RunNumber, Attempt: j.Attempt, WorkerID: *j.WorkerID,
		ErrorCode: "smtp.down", ErrorMessage: "connection refused"}
}

func ids(js []runledger.Job) []uuid.UUID {
	out := make([]uuid.UUID, len(js))
	for i, j := range js {
		out[i] = j.ID
	}
	return out
}

func sameIDs(a, b []uuid.UUID) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// count runs a test query returning one integer.
func count(t *testing.T, ctx context.Context, q jobs.Querier, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := q.QueryRow(ctx, sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

func exec(t *testing.T, ctx context.Context, q jobs.Querier, sql string, args ...any) {
	t.Helper()
	if _, err := q.Exec(ctx, sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// eventTypes returns a job's event types in history order, read with test
// SQL (independent of the package's reads).
func eventTypes(t *testing.T, ctx context.Context, q jobs.Querier, id uuid.UUID) []string {
	t.Helper()
	rs, err := q.Query(ctx, `SELECT event_type::text FROM job_events WHERE job_id = $1 ORDER BY run_number, id`, id)
	if err != nil {
		t.Fatalf("read events: %v", err)
	}
	out, err := pgx.CollectRows(rs, pgx.RowTo[string])
	if err != nil {
		t.Fatalf("read events: %v", err)
	}
	return out
}

func sameStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// lastEvent returns a job's newest event, read with test SQL.
func lastEvent(t *testing.T, ctx context.Context, q jobs.Querier, id uuid.UUID) (typ string, attempt *int32, payload map[string]any, occurred time.Time) {
	t.Helper()
	var raw []byte
	err := q.QueryRow(ctx, `SELECT event_type::text, attempt, payload, occurred_at FROM job_events
		WHERE job_id = $1 ORDER BY id DESC LIMIT 1`, id).Scan(&typ, &attempt, &raw, &occurred)
	if err != nil {
		t.Fatalf("read last event: %v", err)
	}
	if err := json.Unmarshal(raw, &payload); err != nil {
		t.Fatalf("decode event payload %s: %v", raw, err)
	}
	return typ, attempt, payload, occurred
}

func wantCode(t *testing.T, err error, sentinel *runledger.Error) {
	t.Helper()
	if err == nil {
		t.Fatalf("err = nil, want %s", sentinel.Code)
	}
	if !errors.Is(err, sentinel) {
		t.Fatalf("err = %v (code %q), want %s", err, runledger.CodeOf(err), sentinel.Code)
	}
	if got := runledger.CategoryOf(err); got != sentinel.Category {
		t.Fatalf("category = %s, want %s", got, sentinel.Category)
	}
}

// rowLockedAgainst reports whether another transaction holds a lock on the
// job row that conflicts with mode ("UPDATE", "NO KEY UPDATE", "SHARE",
// "KEY SHARE"): it tries the mode with NOWAIT from a separate connection
// and reports lock_not_available.
func rowLockedAgainst(t *testing.T, ctx context.Context, pool *pgxpool.Pool, table string, where string, arg any, mode string) bool {
	t.Helper()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatalf("begin probe: %v", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	var one int
	err = tx.QueryRow(ctx, "SELECT 1 FROM "+table+" WHERE "+where+" FOR "+mode+" NOWAIT", arg).Scan(&one)
	var pgErr *pgconn.PgError
	switch {
	case err == nil:
		return false
	case errors.As(err, &pgErr) && pgErr.Code == "55P03":
		return true
	}
	t.Fatalf("lock probe FOR %s: %v", mode, err)
	return false
}

// waitForBlockedBackend polls, from its own connection, until some backend
// of this database waits for a lock that is not granted (pg_locks), or
// fails the test after the context's deadline. It does not sleep for a
// fixed time: it returns as soon as the wait is visible.
func waitForBlockedBackend(t *testing.T, ctx context.Context, pool *pgxpool.Pool) {
	t.Helper()
	for {
		n := count(t, ctx, pool, `SELECT count(*) FROM pg_locks l
			JOIN pg_stat_activity a ON a.pid = l.pid
			WHERE NOT l.granted AND a.datname = current_database()`)
		if n > 0 {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no backend became blocked: %v", ctx.Err())
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// approx reports whether d is within tol of want.
func approx(d, want, tol time.Duration) bool {
	diff := d - want
	if diff < 0 {
		diff = -diff
	}
	return diff <= tol
}

// testContext bundles a test's context and pool for helpers that need both.
type testContext struct {
	ctx  context.Context
	pool *pgxpool.Pool
}
