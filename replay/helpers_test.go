package replay_test

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/internal/testdb"
	"github.com/runledger-go/runledger/replay"
)

func TestMain(m *testing.M) { testdb.Main(m) }

func testContext(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// mustExec runs a statement of test setup or inspection.
func mustExec(t *testing.T, q pgxQuerier, sql string, args ...any) {
	t.Helper()
	if _, err := q.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("exec %q: %v", sql, err)
	}
}

// scalar reads one value.
func scalar[T any](t *testing.T, q pgxQuerier, sql string, args ...any) T {
	t.Helper()
	var v T
	if err := q.QueryRow(context.Background(), sql, args...).Scan(&v); err != nil {
		t.Fatalf("query %q: %v", sql, err)
	}
	return v
}

// source describes a job seeded directly in SQL (test setup only).
type source struct {
	scope          runledger.Scope
	jobType        string
	status         string
	run            int32
	priority       int32
	maxAttempts    int32
	timeout        int32
	payload        string
	resourceKey    *string
	idempotencyKey *string
}

func succeeded(scope runledger.Scope) source {
	return source{scope: scope, jobType: "email", status: "SUCCEEDED", run: 1, priority: 77,
		maxAttempts: 5, timeout: 123, payload: `{"to":"a@example.com","n":[1,2,3]}`}
}

func defineType(t *testing.T, q pgxQuerier, jobType string) {
	t.Helper()
	mustExec(t, q, `INSERT INTO job_definitions (job_type) VALUES ($1) ON CONFLICT DO NOTHING`, jobType)
}

// seed inserts a finished job as a worker would have left it: attempt 1,
// progress 8/8, a checkpoint and an output.
func seed(t *testing.T, q pgxQuerier, s source) uuid.UUID {
	t.Helper()
	defineType(t, q, s.jobType)
	id := uuid.Must(uuid.NewV7())
	var request any
	if s.idempotencyKey != nil {
		request = `{"seeded":true}`
	}
	mustExec(t, q, `
		INSERT INTO job_queue (id, job_type, organization_id, payload, status, priority, run_number,
		    attempt, max_attempts, timeout_seconds, stage, progress_done, progress_total, checkpoint,
		    output, worker_id, started_at, finished_at, idempotency_key, enqueue_request,
		    execution_resource_key, next_run_at)
		VALUES ($1, $2, $3, $4::jsonb, $5::job_status, $6, $7, 1, $8, $9, 'completed', 8, 8,
		    '{"cursor":8}', '{"sent":true}', 'worker-1', now() - interval '2 minutes',
		    now() - interval '1 minute', $10, $11::jsonb, $12, now() - interval '1 hour')`,
		id, s.jobType, s.scope.OrganizationIDPtr(), s.payload, s.status, s.priority, s.run,
		s.maxAttempts, s.timeout, s.idempotencyKey, request, s.resourceKey)
	return id
}

// pgxQuerier is what pools, connections and transactions share.
type pgxQuerier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// rowLocks is what NOWAIT probes from another connection see of a job row.
type rowLocks struct {
	keyShareBlocked bool // someone holds FOR UPDATE
	shareBlocked    bool // someone holds FOR NO KEY UPDATE or FOR UPDATE
	updateBlocked   bool // someone holds any row lock
}

// heldNoKeyUpdate reports exactly a FOR NO KEY UPDATE lock by another
// transaction: it blocks FOR SHARE but lets FOR KEY SHARE through.
func (l rowLocks) heldNoKeyUpdate() bool { return l.shareBlocked && !l.keyShareBlocked }

// unlocked reports that no other transaction holds any lock on the row.
func (l rowLocks) unlocked() bool { return !l.updateBlocked }

func probeRowLocks(t *testing.T, pool *pgxpool.Pool, id uuid.UUID) rowLocks {
	t.Helper()
	probe := func(mode string) bool {
		ctx := context.Background()
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatalf("probe begin: %v", err)
		}
		defer tx.Rollback(ctx) //nolint:errcheck
		_, err = tx.Exec(ctx, "SELECT 1 FROM job_queue WHERE id = $1 "+mode+" NOWAIT", id)
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "55P03" {
			return true
		}
		if err != nil {
			t.Fatalf("probe %s: %v", mode, err)
		}
		return false
	}
	return rowLocks{
		keyShareBlocked: probe("FOR KEY SHARE"),
		shareBlocked:    probe("FOR SHARE"),
		updateBlocked:   probe("FOR UPDATE"),
	}
}

// rowLockHolders asks PostgreSQL who holds a lock on a job row: it starts a
// FOR UPDATE of the row on another connection, waits until pg_locks shows
// that connection waiting (or the statement finishing, meaning nobody holds
// the row), and returns pg_blocking_pids of the waiter. The waiter is then
// canceled.
func rowLockHolders(t *testing.T, pool *pgxpool.Pool, id uuid.UUID) []uint32 {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatalf("acquire waiter: %v", err)
	}
	defer conn.Release()
	waiterPID := conn.Conn().PgConn().PID()
	done := make(chan error, 1)
	go func() {
		tx, err := conn.Begin(ctx)
		if err != nil {
			done <- err
			return
		}
		_, err = tx.Exec(ctx, `SELECT 1 FROM job_queue WHERE id = $1 FOR UPDATE`, id)
		_ = tx.Rollback(context.Background())
		done <- err
	}()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("waiter: %v", err)
			}
			return nil
		default:
		}
		var blockers []uint32
		if err := pool.QueryRow(context.Background(), `
			SELECT coalesce(array_agg(b ORDER BY b), '{}')::int8[]::int4[]
			FROM unnest(pg_blocking_pids($1)) AS b
			WHERE EXISTS (SELECT 1 FROM pg_locks WHERE pid = $1 AND NOT granted)`,
			int32(waiterPID)).Scan(&blockers); err != nil {
			t.Fatalf("read pg_locks: %v", err)
		}
		if len(blockers) > 0 {
			// Cancel on the server, not through ctx: the waiter's connection
			// stays usable, so its rollback completes before we return and
			// it never gets to take the lock later.
			mustExec(t, pool, `SELECT pg_cancel_backend($1)`, int32(waiterPID))
			<-done
			return blockers
		}
		time.Sleep(5 * time.Millisecond) // polling interval, not synchronisation
	}
	t.Fatalf("waiter on job %s neither blocked nor finished", id)
	return nil
}

// waitUntilWaitingOnLock polls pg_stat_activity until the backend pid waits
// on a heavyweight lock.
func waitUntilWaitingOnLock(t *testing.T, pool *pgxpool.Pool, pid uint32) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		waiting := scalar[bool](t, pool, `
			SELECT EXISTS (SELECT 1 FROM pg_locks WHERE pid = $1 AND NOT granted)`, int32(pid))
		if waiting {
			return
		}
		time.Sleep(5 * time.Millisecond) // polling interval, not synchronisation
	}
	t.Fatalf("backend %d never waited on a lock", pid)
}

// mustReplayed returns a function that fails the test unless its arguments
// are a Replayed outcome and no error: mustReplayed(t)(replay.SucceededJob(...)).
func mustReplayed(t *testing.T) func(replay.Outcome, error) replay.Replayed {
	return func(out replay.Outcome, err error) replay.Replayed {
		t.Helper()
		return checkReplayed(t, out, err)
	}
}

func checkReplayed(t *testing.T, out replay.Outcome, err error) replay.Replayed {
	t.Helper()
	if err != nil {
		t.Fatalf("replay: %v (%s)", err, detail(err))
	}
	r, ok := out.(replay.Replayed)
	if !ok {
		t.Fatalf("outcome %T %+v, want Replayed", out, out)
	}
	return r
}

func detail(err error) string {
	var e *runledger.Error
	if errors.As(err, &e) {
		return e.Detail
	}
	return ""
}

func wantCode(t *testing.T, err error, code string) *runledger.Error {
	t.Helper()
	var e *runledger.Error
	if !errors.As(err, &e) {
		t.Fatalf("error %v (%T), want *runledger.Error with code %s", err, err, code)
	}
	if e.Code != code {
		t.Fatalf("code %s (%s), want %s", e.Code, e.Detail, code)
	}
	return e
}

func jsonEqual(t *testing.T, got []byte, want string) {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("decode %s: %v", got, err)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("decode want %s: %v", want, err)
	}
	if !reflect.DeepEqual(g, w) {
		t.Fatalf("json %s, want %s", got, want)
	}
}

func countRows(t *testing.T, q pgxQuerier, table string) int64 {
	t.Helper()
	return scalar[int64](t, q, "SELECT count(*) FROM "+table)
}

// poolWith opens a pool on a fresh database with room for conns
// connections and the given runtime parameters (session settings).
func poolWith(t *testing.T, conns int32, params map[string]string) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(testdb.NewURL(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = conns
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

// waitUntil polls cond until it holds, failing the test after 20 seconds.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond) // polling interval, not synchronisation
	}
}

func testdbURLForExample() (string, error) { return testdb.NewURLForExample() }
