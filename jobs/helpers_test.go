package jobs_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/internal/testdb"
	"github.com/runledger-go/runledger/jobs"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// setup returns a fresh migrated database with job type "email" defined
// (defaults: 8 attempts, 900 s, priority 100, enabled).
func setup(t *testing.T) (context.Context, *pgxpool.Pool) {
	t.Helper()
	pool := testdb.New(t)
	ctx := testdb.Context(t)
	testdb.Define(t, ctx, pool, jobs.DefinitionInput{JobType: "email"})
	return ctx, pool
}

// claimOnly claims with limit 10 and fails unless exactly the job want is
// leased.
func claimOnly(t *testing.T, ctx context.Context, pool *pgxpool.Pool, want uuid.UUID) runledger.Job {
	t.Helper()
	got := testdb.Claim(t, ctx, pool, jobs.ClaimRequest{})
	if len(got) != 1 || got[0].ID != want {
		t.Fatalf("claimed %v, want only %s", testdb.IDs(got), want)
	}
	return got[0]
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

func wantCode(t *testing.T, err error, code runledger.Code) {
	t.Helper()
	if err == nil {
		t.Fatalf("err = nil, want %s", code)
	}
	if !errors.Is(err, code) {
		t.Fatalf("err = %v (code %q), want %s", err, runledger.CodeOf(err), code)
	}
	want, ok := codeCategories[code]
	if !ok {
		want = runledger.CategoryValidation
	}
	if got := runledger.CategoryOf(err); got != want {
		t.Fatalf("category = %s, want %s", got, want)
	}
}

// codeCategories are the categories of the codes these tests expect that
// are not Validation codes; the category is part of each code's contract.
var codeCategories = map[runledger.Code]runledger.Category{
	runledger.CodeJobNotFound:         runledger.CategoryNotFound,
	runledger.CodeDefinitionMissing:   runledger.CategoryNotFound,
	runledger.CodeLeaseMismatch:       runledger.CategoryConflict,
	runledger.CodeNotCancelable:       runledger.CategoryConflict,
	runledger.CodeIdempotencyConflict: runledger.CategoryConflict,
	runledger.CodeAlreadyEnqueued:     runledger.CategoryConflict,
	runledger.ErrCommitUnconfirmed:    runledger.CategoryInternal,
	runledger.CodeInvariantViolated:   runledger.CategoryInternal,
	runledger.CodeTransient:           runledger.CategoryTransient,
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
		n := testdb.Scalar[int](t, pool, `SELECT count(*) FROM pg_locks l
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
