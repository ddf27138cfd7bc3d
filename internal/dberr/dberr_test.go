package dberr_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/internal/dberr"
	"github.com/runledger-go/runledger/internal/testdb"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// TestClassifyStates checks the SQLSTATE table: every transient state and
// the whole 08 class are transient; the integrity states keep their codes.
func TestClassifyStates(t *testing.T) {
	t.Parallel()
	cases := []struct {
		state    string
		code     runledger.Code
		category runledger.Category
	}{
		{"40001", runledger.CodeTransient, runledger.CategoryTransient},
		{"40P01", runledger.CodeTransient, runledger.CategoryTransient},
		{"55P03", runledger.CodeTransient, runledger.CategoryTransient},
		{"57014", runledger.CodeTransient, runledger.CategoryTransient},
		{"53300", runledger.CodeTransient, runledger.CategoryTransient},
		{"25P03", runledger.CodeTransient, runledger.CategoryTransient},
		{"57P01", runledger.CodeTransient, runledger.CategoryTransient},
		{"57P02", runledger.CodeTransient, runledger.CategoryTransient},
		{"57P03", runledger.CodeTransient, runledger.CategoryTransient},
		{"57P05", runledger.CodeTransient, runledger.CategoryTransient},
		{"08000", runledger.CodeTransient, runledger.CategoryTransient},
		{"08006", runledger.CodeTransient, runledger.CategoryTransient},
		{"08P01", runledger.CodeTransient, runledger.CategoryTransient},
		{"23505", runledger.CodeUniqueViolation, runledger.CategoryConflict},
		{"23503", "db.related_resource_missing", runledger.CategoryValidation},
		{"42501", "db.permission_denied", runledger.CategoryForbidden},
		{"57P04", runledger.CodeQueryFailed, runledger.CategoryInternal},
		{"22012", "db.invalid_value", runledger.CategoryValidation},
		{"22003", "db.invalid_value", runledger.CategoryValidation},
		{"22P02", "db.invalid_value", runledger.CategoryValidation},
	}
	for _, c := range cases {
		err := dberr.Translate(context.Background(), "op", &pgconn.PgError{Code: c.state})
		var e *runledger.Error
		if !errors.As(err, &e) || e.Code != c.code || e.Category != c.category || e.SQLState != c.state {
			t.Errorf("SQLSTATE %s: %+v, want %s/%s", c.state, e, c.code, c.category)
		}
	}
}

// Citus passes a worker's integrity error on with its SQLSTATE and text
// only: the constraint is read back from the name quoted after
// "constraint " (without a shard id), and classifies as the constraint
// would.
func TestConstraintNameFromACitusMessage(t *testing.T) {
	t.Parallel()
	cases := []struct {
		err  pgconn.PgError
		want string
	}{
		{pgconn.PgError{Code: "23505", ConstraintName: "uq_job_replays_source_request"}, "uq_job_replays_source_request"},
		{pgconn.PgError{Code: "23505", Message: `duplicate key value violates unique constraint "uq_job_queue_type_idempotency_global_102013"`}, "uq_job_queue_type_idempotency_global"},
		{pgconn.PgError{Code: "23503", Message: `insert or update on table "job_replays_102018" violates foreign key constraint "fk_job_replays_source_job_102018"`}, "fk_job_replays_source_job"},
		{pgconn.PgError{Code: "23503", Message: `update or delete on table "job_queue_102013" violates foreign key constraint "fk_job_replays_replay_job_102021" on table "job_replays_102021"`}, "fk_job_replays_replay_job"},
		{pgconn.PgError{Code: "23514", Message: `new row for relation "job_queue_102013" violates check constraint "chk_job_queue_stage_not_blank"`}, "chk_job_queue_stage_not_blank"},
		{pgconn.PgError{Code: "23514", Message: "a leased job with an execution resource key needs its claim"}, ""},
		{pgconn.PgError{Code: "40P01", Message: `deadlock on constraint "x_1"`}, ""},
	}
	for _, c := range cases {
		if got := dberr.Constraint(&c.err); got != c.want {
			t.Errorf("%q: constraint %q, want %q", c.err.Message, got, c.want)
		}
	}
	err := dberr.Translate(context.Background(), "op", &pgconn.PgError{Code: "23505",
		Message: `duplicate key value violates unique constraint "uq_job_queue_type_idempotency_org_102010"`})
	if e := testdb.WantCode(t, err, runledger.CodeAlreadyEnqueued); e.Constraint != "uq_job_queue_type_idempotency_org" {
		t.Fatalf("%+v", e)
	}
}

// conn opens one connection of its own to a fresh database.
func conn(t *testing.T) (*pgx.Conn, *pgxpool.Pool) {
	t.Helper()
	url := testdb.NewURL(t)
	return testdb.Connect(t, url), testdb.OpenPool(t, url, 4, nil)
}

// waitGone polls pg_stat_activity until the backend pid has exited.
func waitGone(t *testing.T, pool *pgxpool.Pool, pid uint32) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var n int
		if err := pool.QueryRow(context.Background(),
			"SELECT count(*) FROM pg_stat_activity WHERE pid = $1", int32(pid)).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("backend %d still alive", pid)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// wantTranslatedTransient checks that the translation of err is
// db.transient with the SQLSTATE the server sent, not wrapping a context
// error.
func wantTranslatedTransient(t *testing.T, err error, state string) {
	t.Helper()
	if err == nil {
		t.Fatal("statement on an ended session succeeded")
	}
	out := dberr.Translate(context.Background(), "run statement", err)
	e := testdb.WantCode(t, out, runledger.CodeTransient)
	if e.SQLState != state {
		t.Fatalf("SQLState %q (cause %v), want %s", e.SQLState, err, state)
	}
	if errors.Is(out, context.Canceled) || errors.Is(out, context.DeadlineExceeded) {
		t.Fatalf("%v wraps a context error", out)
	}
}

// TestIdleInTransactionTimeoutIsTransient: the server ends a session idle
// in a transaction with FATAL 25P03; the next statement reports it.
func TestIdleInTransactionTimeoutIsTransient(t *testing.T) {
	t.Parallel()
	c, pool := conn(t)
	ctx := context.Background()
	if _, err := c.Exec(ctx, "SET idle_in_transaction_session_timeout = '20ms'"); err != nil {
		t.Fatal(err)
	}
	tx, err := c.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	waitGone(t, pool, c.PgConn().PID())
	_, err = tx.Exec(ctx, "SELECT 1")
	wantTranslatedTransient(t, err, "25P03")
}

// TestIdleSessionTimeoutIsTransient: the server ends an idle session with
// FATAL 57P05 (PostgreSQL 14 and later).
func TestIdleSessionTimeoutIsTransient(t *testing.T) {
	t.Parallel()
	c, pool := conn(t)
	ctx := context.Background()
	var version int
	if err := c.QueryRow(ctx, "SELECT current_setting('server_version_num')::int").Scan(&version); err != nil {
		t.Fatal(err)
	}
	if version < 140000 {
		t.Skipf("idle_session_timeout needs PostgreSQL 14, server is %d", version)
	}
	if _, err := c.Exec(ctx, "SET idle_session_timeout = '20ms'"); err != nil {
		t.Fatal(err)
	}
	waitGone(t, pool, c.PgConn().PID())
	_, err := c.Exec(ctx, "SELECT 1")
	wantTranslatedTransient(t, err, "57P05")
}

// TestTerminatedBackendIsTransient: pg_terminate_backend ends a session
// with FATAL 57P01 (admin_shutdown).
func TestTerminatedBackendIsTransient(t *testing.T) {
	t.Parallel()
	c, pool := conn(t)
	ctx := context.Background()
	pid := c.PgConn().PID()
	var ok bool
	if err := pool.QueryRow(ctx, "SELECT pg_terminate_backend($1::int)", int32(pid)).Scan(&ok); err != nil || !ok {
		t.Fatalf("terminate backend: %v, %v", ok, err)
	}
	waitGone(t, pool, pid)
	_, err := c.Exec(ctx, "SELECT 1")
	wantTranslatedTransient(t, err, "57P01")
}

// TestServerErrorKeepsClassAfterContextEnds: an error the server returned
// keeps its own class when the context is done by the time it is
// translated; only a failure that is not a server answer becomes the
// interrupted transient error.
func TestServerErrorKeepsClassAfterContextEnds(t *testing.T) {
	t.Parallel()
	c, _ := conn(t)
	ctx, cancel := context.WithCancel(context.Background())
	_, divErr := c.Exec(ctx, "SELECT * FROM no_such_table_for_this_test")
	_, uniqueErr := c.Exec(ctx,
		"DO $$ BEGIN RAISE unique_violation USING MESSAGE = 'duplicate'; END $$")
	cancel()
	for _, tc := range []struct {
		err      error
		code     runledger.Code
		category runledger.Category
	}{
		{divErr, runledger.CodeQueryFailed, runledger.CategoryInternal},
		{uniqueErr, runledger.CodeUniqueViolation, runledger.CategoryConflict},
	} {
		var pgErr *pgconn.PgError
		if !errors.As(tc.err, &pgErr) {
			t.Fatalf("statement error %v is not a server error", tc.err)
		}
		out := dberr.Translate(ctx, "run statement", tc.err)
		if runledger.CodeOf(out) != tc.code || runledger.CategoryOf(out) != tc.category {
			t.Errorf("after cancel, %v translated to %v, want %s/%s", tc.err, out, tc.code, tc.category)
		}
		if errors.Is(out, context.Canceled) {
			t.Errorf("%v wraps context.Canceled", out)
		}
	}

	// A failure that is not a server answer, with the context done, is
	// the interrupted transient error wrapping ctx.Err().
	out := dberr.Translate(ctx, "run statement", fmt.Errorf("read result: %w", errors.New("boom")))
	if !runledger.IsTransient(out) || !errors.Is(out, context.Canceled) {
		t.Fatalf("non-server failure after cancel translated to %v, want transient wrapping context.Canceled", out)
	}
}

// TestCanceledStatementWrapsContext: a statement the context's cancel
// interrupts (pgx sends a cancel request, the server answers 57014) is
// transient and wraps ctx.Err().
func TestCanceledStatementWrapsContext(t *testing.T) {
	t.Parallel()
	c, _ := conn(t)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := c.Exec(ctx, "SELECT pg_sleep(30)")
	out := dberr.Translate(ctx, "sleep", err)
	if !runledger.IsTransient(out) || !errors.Is(out, context.DeadlineExceeded) {
		t.Fatalf("canceled statement (%v) translated to %v, want transient wrapping context.DeadlineExceeded", err, out)
	}
}

// TestClosedConnectionIsTransient: a connection that failed earlier in the
// same operation makes pgx answer pgconn.ErrConnClosed, which it does not
// mark safe to retry (seen when a restart cuts a BEGIN); the connection is
// lost, nothing more was done on it, so it is transient.
func TestClosedConnectionIsTransient(t *testing.T) {
	t.Parallel()
	err := fmt.Errorf("begin: %w", pgconn.ErrConnClosed)
	if pgconn.SafeToRetry(err) {
		t.Fatal("pgconn.ErrConnClosed is safe to retry: this test no longer covers the case")
	}
	if out := dberr.Translate(context.Background(), "begin transaction", err); !runledger.IsTransient(out) {
		t.Fatalf("translated %v to %v, want transient", err, out)
	}
}

// TestCallersDataRefusedIsValidation sends values the server refuses as
// data: a data exception (class 22) and a check violation are Validation
// errors whose message names the field when the server does, or the
// check constraint does.
func TestCallersDataRefusedIsValidation(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	ctx := context.Background()
	cases := []struct {
		name, sql string
		args      []any
		code      runledger.Code
		inMessage string
	}{
		{"number beyond numeric", `SELECT $1::jsonb`, []any{[]byte(`{"n": 1e131072}`)}, "db.invalid_value", "value overflows numeric format"},
		{"integer out of range", `SELECT $1::text::int4`, []any{"99999999999"}, "db.invalid_value", "out of range"},
		{"check violation", `INSERT INTO job_definitions (job_type, max_attempts) VALUES ('t', $1)`, []any{0}, "db.business_rule_violation", "(field max_attempts)"},
	}
	for _, c := range cases {
		_, err := pool.Exec(ctx, c.sql, c.args...)
		err = dberr.Translate(ctx, c.name, err)
		var e *runledger.Error
		if !errors.As(err, &e) || e.Code != c.code || e.Category != runledger.CategoryValidation || !strings.Contains(e.Message, c.inMessage) {
			t.Errorf("%s: %+v, want %s (validation) saying %q", c.name, e, c.code, c.inMessage)
		}
	}
}
