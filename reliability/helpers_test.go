package reliability_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"reflect"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/internal/failpoint"
	"github.com/runledger-go/runledger/internal/testdb"
	"github.com/runledger-go/runledger/internal/testdb/pgproxy"
	"github.com/runledger-go/runledger/lease"
	"github.com/runledger-go/runledger/replay"
)

// TestMain runs the tests, or, in a worker child the worker tests start
// (childEnv set), a worker instead.
func TestMain(m *testing.M) {
	if spec := os.Getenv(childEnv); spec != "" {
		os.Exit(runWorkerChild(spec))
	}
	testdb.Main(m)
}

// env is one test's database: admin is a pool for setup, inspection and
// killing (application_name rl-admin), url its connection string.
type env struct {
	t     *testing.T
	url   string
	admin *pgxpool.Pool
}

func newEnv(t *testing.T) *env {
	t.Helper()
	url := testdb.NewURL(t)
	return &env{t: t, url: url, admin: openPool(t, url, "rl-admin", 8, nil)}
}

// openPool opens a pool on url whose connections carry application_name
// app, so the test can find their backends in pg_stat_activity.
func openPool(t testing.TB, url, app string, maxConns int32, params map[string]string) *pgxpool.Pool {
	t.Helper()
	withApp := map[string]string{"application_name": app}
	for k, v := range params {
		withApp[k] = v
	}
	return testdb.OpenPool(t, url, maxConns, withApp)
}

// target opens a one-connection pool for the operation under test, with a
// unique application_name; it returns the pool and that name.
func (e *env) target(params map[string]string) (*pgxpool.Pool, string) {
	app := "rl-target-" + testdb.RandomHex(4)
	return openPool(e.t, e.url, app, 1, params), app
}

// proxied starts a fault proxy (package pgproxy, inspecting the server's
// replies, each shown to observe if set) in front of the test's server,
// and opens a one-connection pool through it with a unique
// application_name; it returns the proxy, the pool and that name. Both
// are closed at cleanup.
func (e *env) proxied(observe func(pgproxy.Message)) (*pgproxy.Proxy, *pgxpool.Pool, string) {
	e.t.Helper()
	addr, err := pgproxy.TargetAddr(e.url)
	if err != nil {
		e.t.Fatal(err)
	}
	proxy, err := pgproxy.Start(addr, pgproxy.Options{Inspect: true, Observe: observe})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(proxy.Close)
	app := "rl-target-" + testdb.RandomHex(4)
	return proxy, openPool(e.t, proxy.ConnString(e.url), app, 1, nil), app
}

// armLostWrite arms proxy to swallow the reply that tells a write that
// commits on its own (complete, fail, cancel, an unkeyed enqueue) through
// pool it committed: the write's own reply on one server, where it is one
// autocommit statement, and its COMMIT's on Citus, where the write and its
// events are one transaction.
// It first has pool learn whether the database runs Citus (a lease
// recovery with nothing to recover asks), so that question's reply is
// never the one lost.
func armLostWrite(t *testing.T, ctx context.Context, proxy *pgproxy.Proxy, pool *pgxpool.Pool) {
	t.Helper()
	if _, err := lease.RecoverExpiredLeases(ctx, pool, 1); err != nil {
		t.Fatalf("learn whether the database runs Citus: %v", err)
	}
	if testdb.Citus() {
		proxy.DropReply("COMMIT")
		return
	}
	proxy.DropReply("SELECT")
}

// rowsJSON returns every row of a table as JSON text, ordered, so two
// snapshots can be compared for any change.
func rowsJSON(t testing.TB, q testdb.Querier, table, orderBy string) []string {
	t.Helper()
	return testdb.Column[string](t, q, "SELECT row_to_json(x)::text FROM "+table+" x ORDER BY "+orderBy)
}

// snapshot is the whole ledger's contents.
type snapshot struct{ jobs, events, replays []string }

func takeSnapshot(t testing.TB, q testdb.Querier) snapshot {
	t.Helper()
	return snapshot{
		jobs:    rowsJSON(t, q, "job_queue", "id"),
		events:  rowsJSON(t, q, "job_events", "id"),
		replays: rowsJSON(t, q, "job_replays", "replay_job_id"),
	}
}

func (s snapshot) equal(o snapshot) bool { return reflect.DeepEqual(s, o) }

// ---- failpoints ------------------------------------------------------------

// Failpoints are process-wide and failpoint.Enable replaces the hook at a
// name, so this package installs one dispatcher per name, once, and routes
// each call to the hook registered for the tag carried by the call's
// context. Tests that use failpoints can then run in parallel with each
// other and with tests that reach the same points untagged.

type tagKey struct{}

var (
	tagSeq   atomic.Uint64
	fpMu     sync.Mutex
	fpHooks  = map[string]map[uint64]failpoint.Hook{}
	fpActive = map[string]bool{}
)

// tagged returns ctx carrying a new tag for onFailpoint.
func tagged(ctx context.Context) (context.Context, uint64) {
	id := tagSeq.Add(1)
	return context.WithValue(ctx, tagKey{}, id), id
}

// onFailpoint runs hook at failpoint name for every call whose context
// carries tag, until the test ends. The hook runs on the goroutine of the
// operation.
func onFailpoint(t testing.TB, name string, tag uint64, hook failpoint.Hook) {
	t.Helper()
	fpMu.Lock()
	defer fpMu.Unlock()
	if !fpActive[name] {
		fpActive[name] = true
		hookOf := func(ctx context.Context) failpoint.Hook {
			id, _ := ctx.Value(tagKey{}).(uint64)
			fpMu.Lock()
			defer fpMu.Unlock()
			return fpHooks[name][id]
		}
		failpoint.EnableFor(name, func(ctx context.Context, arg any) {
			if h := hookOf(ctx); h != nil {
				h(ctx, arg)
			}
		}, func(ctx context.Context) bool { return hookOf(ctx) != nil })
	}
	if fpHooks[name] == nil {
		fpHooks[name] = map[uint64]failpoint.Hook{}
	}
	fpHooks[name][tag] = hook
	t.Cleanup(func() {
		fpMu.Lock()
		defer fpMu.Unlock()
		delete(fpHooks[name], tag)
	})
}

// ---- backends, locks and kills --------------------------------------------

// backendOf returns the pid of the one backend whose application_name is
// app, failing unless there is exactly one.
func (e *env) backendOf(app string) int32 {
	e.t.Helper()
	pids := testdb.Column[int32](e.t, e.admin, `SELECT pid FROM pg_stat_activity WHERE application_name = $1`, app)
	if len(pids) != 1 {
		e.t.Fatalf("backends of %s: %v; want exactly one", app, pids)
	}
	return pids[0]
}

// kill terminates backend pid from the admin pool and returns once the
// backend has exited: its transaction is rolled back and its locks are
// released (PostgreSQL releases them before it removes the backend from
// pg_stat_activity).
func (e *env) kill(pid int32) {
	e.t.Helper()
	if !testdb.Scalar[bool](e.t, e.admin, `SELECT pg_terminate_backend($1::int)`, pid) {
		e.t.Fatalf("pg_terminate_backend(%d) found no such backend", pid)
	}
	e.waitFor(fmt.Sprintf("backend %d to exit", pid), func() bool {
		return !testdb.Scalar[bool](e.t, e.admin, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $1)`, pid)
	})
}

// killApp terminates the backend of the pool whose application_name is app.
func (e *env) killApp(app string) { e.kill(e.backendOf(app)) }

// waitingPID returns the backend of app once it waits for a lock that is
// not granted (of locktype, or any type if empty).
func (e *env) waitingPID(app, locktype string) int32 {
	e.t.Helper()
	var pid int32
	e.waitFor(app+" to wait for a lock", func() bool {
		if testdb.Citus() {
			// The wait is on a worker node, where citus_lock_waits does
			// not say on what kind of lock.
			pid = testdb.Scalar[int32](e.t, e.admin, `
				SELECT coalesce(min(w.pid), 0) FROM (`+testdb.WaitersSQL()+`) w JOIN pg_stat_activity a USING (pid)
				WHERE a.application_name = $1`, app)
			return pid != 0
		}
		pid = testdb.Scalar[int32](e.t, e.admin, `
			SELECT coalesce(min(l.pid), 0) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
			WHERE a.application_name = $1 AND NOT l.granted AND ($2 = '' OR l.locktype = $2)`, app, locktype)
		return pid != 0
	})
	return pid
}

// waitNoLocks waits until backend pid holds and awaits no lock at all (it
// ended its transaction or exited). pgx cancels asynchronously, so a
// statement that returned on the client may still run on the server for a
// moment.
func (e *env) waitNoLocks(pid int32) {
	e.t.Helper()
	e.waitFor(fmt.Sprintf("backend %d to release its locks", pid), func() bool {
		return testdb.Scalar[int64](e.t, e.admin, `SELECT count(*) FROM pg_locks WHERE pid = $1`, pid) == 0
	})
}

// waitFor is testdb.WaitFor for this test.
func (e *env) waitFor(what string, cond func() bool) {
	e.t.Helper()
	testdb.WaitFor(e.t, what, cond)
}

// holdRow locks rows FOR UPDATE in a transaction of the admin pool and
// returns its release.
func (e *env) holdRow(table, where string, args ...any) (release func()) {
	e.t.Helper()
	ctx := context.Background()
	tx, err := e.admin.Begin(ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	if table != "job_definitions" {
		// Name the rows' tenant, as Citus needs for a row lock.
		tenant := testdb.Scalar[uuid.UUID](e.t, e.admin, "SELECT DISTINCT organization_id FROM "+table+" WHERE "+where, args...)
		args = append(args, tenant)
		where = fmt.Sprintf("organization_id = $%d AND (%s)", len(args), where)
	}
	lock := "SELECT 1 FROM " + table + " WHERE " + where + " FOR UPDATE"
	if table == "job_definitions" && testdb.Citus() {
		// A row lock of a reference table is on one node's copy; a write
		// locks the row on every node's, where the statements that read
		// the definition run.
		lock = "UPDATE job_definitions SET version = version WHERE " + where
	}
	if _, err := tx.Exec(ctx, lock, args...); err != nil {
		_ = tx.Rollback(ctx)
		e.t.Fatalf("hold %s: %v", table, err)
	}
	var once sync.Once
	release = func() { once.Do(func() { _ = tx.Rollback(ctx) }) }
	e.t.Cleanup(release)
	return release
}

// commitGate makes the COMMIT of any transaction that inserted into table
// (rows matching when, a trigger WHEN condition or "") wait for advisory
// lock key: a deferred constraint trigger takes pg_advisory_xact_lock(key)
// at commit time. hold takes the lock on a dedicated connection, so COMMIT
// blocks until release.
func (e *env) commitGate(table, when string, key int64) (hold func() (release func())) {
	e.t.Helper()
	if testdb.Citus() {
		e.t.Skip("Citus refuses triggers on distributed tables, and an advisory lock is one node's: the COMMIT gate is a single server's")
	}
	fn := "rl_test_gate_" + table
	testdb.Exec(e.t, e.admin, fmt.Sprintf(`
		CREATE OR REPLACE FUNCTION %s() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			PERFORM pg_advisory_xact_lock(%d);
			RETURN NULL;
		END $$`, fn, key))
	cond := ""
	if when != "" {
		cond = "WHEN (" + when + ")"
	}
	testdb.Exec(e.t, e.admin, fmt.Sprintf(`
		CREATE CONSTRAINT TRIGGER %s AFTER INSERT ON %s
		DEFERRABLE INITIALLY DEFERRED FOR EACH ROW %s EXECUTE FUNCTION %s()`, fn, table, cond, fn))
	return func() func() {
		ctx := context.Background()
		conn, err := e.admin.Acquire(ctx)
		if err != nil {
			e.t.Fatal(err)
		}
		testdb.Exec(e.t, conn, `SELECT pg_advisory_lock($1)`, key)
		var once sync.Once
		release := func() {
			once.Do(func() {
				testdb.Exec(e.t, conn, `SELECT pg_advisory_unlock($1)`, key)
				conn.Release()
			})
		}
		e.t.Cleanup(release)
		return release
	}
}

// ---- errors ----------------------------------------------------------------

// errClass names the class of an error for counting: "transient",
// "commit_unconfirmed", or the code.
func errClass(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, runledger.ErrCommitUnconfirmed):
		return "commit_unconfirmed"
	case runledger.IsTransient(err):
		return "transient"
	}
	if c := runledger.CodeOf(err); c != "" {
		return string(c)
	}
	return "untyped"
}

// ---- replay checks ---------------------------------------------------------

func req(source uuid.UUID, key, reason string) replay.Request {
	return replay.Request{Scope: runledger.Global(), SourceJobID: source, ExpectedRunNumber: 1, Key: key, Reason: reason}
}

// checkOneReplay verifies the ledger after a replay of source with key and
// reason converged: exactly one lineage row for the key, its replay job
// PENDING at run 1 with exactly one event (ENQUEUED, five-key payload), and
// nothing else written: the only jobs are the sources and that replay. It
// returns the replay id.
func checkOneReplay(t testing.TB, q testdb.Querier, sourceID uuid.UUID, key, reason string, jobsBesides int) uuid.UUID {
	t.Helper()
	rs, err := q.Query(context.Background(), `
		SELECT replay_job_id FROM job_replays
		WHERE source_job_id = $1 AND source_run_number = 1 AND replay_request_key = $2 AND reason = $3`,
		sourceID, key, reason)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := pgx.CollectRows(rs, pgx.RowTo[uuid.UUID])
	if err != nil || len(ids) != 1 {
		t.Fatalf("lineage rows for key %q: %v, %v; want exactly one", key, ids, err)
	}
	id := ids[0]
	if n := testdb.Scalar[int64](t, q, `SELECT count(*) FROM job_replays`); n != 1 {
		t.Fatalf("%d lineage rows, want 1", n)
	}
	if n := testdb.Scalar[int64](t, q, `SELECT count(*) FROM job_queue`); n != int64(jobsBesides)+1 {
		t.Fatalf("%d jobs, want %d (sources) + 1 replay", n, jobsBesides)
	}
	var status string
	var run int32
	if err := q.QueryRow(context.Background(), `SELECT status::text, run_number FROM job_queue WHERE id = $1`, id).Scan(&status, &run); err != nil {
		t.Fatalf("replay job %s: %v", id, err)
	}
	if status != "PENDING" || run != 1 {
		t.Fatalf("replay job %s is %s at run %d", id, status, run)
	}
	var typ string
	var payload []byte
	if err := q.QueryRow(context.Background(), `SELECT event_type::text, payload FROM job_events WHERE job_id = $1`, id).Scan(&typ, &payload); err != nil {
		t.Fatalf("replay event: %v (want exactly one)", err)
	}
	if n := testdb.Scalar[int64](t, q, `SELECT count(*) FROM job_events`); n != 1 || typ != "ENQUEUED" {
		t.Fatalf("%d events, the replay's is %s; want exactly one ENQUEUED", n, typ)
	}
	var got map[string]any
	if err := json.Unmarshal(payload, &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"job_type": "email", "replayed_from_job_id": sourceID.String(),
		"replayed_from_run_number": float64(1), "replay_request_key": key, "reason": reason}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("event payload %v, want %v", got, want)
	}
	return id
}

// checkNothingWritten fails unless the ledger equals before.
func checkNothingWritten(t testing.TB, q testdb.Querier, before snapshot) {
	t.Helper()
	if after := takeSnapshot(t, q); !after.equal(before) {
		t.Fatalf("the failed operation left rows behind or changed some:\nbefore %v\nafter  %v", before, after)
	}
}

func sortedKeys[M ~map[string]V, V any](m M) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func formatCounts(m map[string]int) string {
	var b strings.Builder
	for i, k := range sortedKeys(m) {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s=%d", k, m[k])
	}
	return b.String()
}
