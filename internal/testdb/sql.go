package testdb

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Test SQL: setup and inspection statements that fail the test instead of
// returning an error. Each statement runs under its own statementTimeout,
// so a statement that waits when it should not fails the test rather than
// hanging it.

// statementTimeout bounds one statement of Exec, Scalar and Column.
const statementTimeout = 60 * time.Second

// testTimeout bounds one test's Context.
const testTimeout = 90 * time.Second

// Querier is what pools, pooled connections, connections and transactions
// share; the helpers take any of them.
type Querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Context returns a context that ends 90 seconds into the test, or when it
// ends: give it to the operation under test, so that one that waits when
// it should not fails the test instead of hanging it.
func Context(t testing.TB) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

// Exec runs a statement of test setup or inspection.
func Exec(t testing.TB, q Querier, sql string, args ...any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), statementTimeout)
	defer cancel()
	if _, err := q.Exec(ctx, sql, args...); err != nil {
		t.Fatalf("exec %q: %v", sql, err)
	}
}

// Scalar runs a query that returns one row of one column and scans it into
// a T.
func Scalar[T any](t testing.TB, q Querier, sql string, args ...any) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), statementTimeout)
	defer cancel()
	var v T
	if err := q.QueryRow(ctx, sql, args...).Scan(&v); err != nil {
		t.Fatalf("query %q: %v", sql, err)
	}
	return v
}

// Column runs a query of one column and returns its values in row order
// (empty, not nil, when there are no rows).
func Column[T any](t testing.TB, q Querier, sql string, args ...any) []T {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), statementTimeout)
	defer cancel()
	rs, err := q.Query(ctx, sql, args...)
	if err != nil {
		t.Fatalf("query %q: %v", sql, err)
	}
	out, err := pgx.CollectRows(rs, pgx.RowTo[T])
	if err != nil {
		t.Fatalf("query %q: %v", sql, err)
	}
	if out == nil {
		out = []T{}
	}
	return out
}

// Count returns the number of rows in table.
func Count(t testing.TB, q Querier, table string) int64 {
	t.Helper()
	return Scalar[int64](t, q, "SELECT count(*) FROM "+table)
}

// EventTypes returns a job's event types in history order (run, then id),
// read with test SQL, independent of the library's reads.
func EventTypes(t testing.TB, q Querier, jobID uuid.UUID) []string {
	t.Helper()
	return Column[string](t, q, `SELECT event_type::text FROM job_events WHERE job_id = $1 ORDER BY run_number, id`, jobID)
}

// OpenPool opens a pool on url with at most maxConns connections and the
// given runtime parameters (session settings such as application_name or
// lock_timeout), closed at cleanup.
func OpenPool(t testing.TB, url string, maxConns int32, params map[string]string) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = maxConns
	for k, v := range params {
		cfg.ConnConfig.RuntimeParams[k] = v
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// Connect opens one connection of its own to url, closed at cleanup.
func Connect(t testing.TB, url string) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), statementTimeout)
	defer cancel()
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}

// ClosedPool returns a closed pool configured for an address where nothing
// listens: any operation that reached for the database would fail, so a
// validation error from it proves no round trip was attempted.
func ClosedPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), "postgres://nobody@127.0.0.1:1/none?connect_timeout=1&sslmode=disable")
	if err != nil {
		t.Fatal(err)
	}
	pool.Close()
	return pool
}

// WaitFor polls cond until it holds, failing the test after 30 seconds.
// cond is a catalog query (pg_locks, pg_stat_activity) or another
// observation of state; the interval is a poll, not a synchronisation.
func WaitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond) // polling interval, not synchronisation
	}
}

// JSONEqual fails unless got and want are the same JSON value (object key
// order and spacing aside).
func JSONEqual(t testing.TB, what string, got []byte, want string) {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("%s: decode %s: %v", what, got, err)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("%s: decode want %s: %v", what, want, err)
	}
	if !reflect.DeepEqual(g, w) {
		t.Fatalf("%s = %s, want %s", what, got, want)
	}
}

// JobState is what a refused write must leave unchanged: a job row's
// lease columns and the count of its events, as one string to compare.
func JobState(t testing.TB, ctx context.Context, q Querier, id uuid.UUID) string {
	t.Helper()
	var s string
	if err := q.QueryRow(ctx, `
		SELECT concat_ws('|', status, stage, run_number, attempt, worker_id, lease_expires_at, finished_at,
		                 last_error_code, output::text, updated_at,
		                 (SELECT count(*) FROM job_events e WHERE e.organization_id = j.organization_id AND e.job_id = j.id))
		FROM job_queue j WHERE id = $1`, id).Scan(&s); err != nil {
		t.Fatal(err)
	}
	return s
}

// JSONString returns a JSON string value exactly n bytes long (n >= 2),
// for tests of the size limits on payloads and outputs.
func JSONString(n int) json.RawMessage {
	return json.RawMessage(`"` + strings.Repeat("x", n-2) + `"`)
}
