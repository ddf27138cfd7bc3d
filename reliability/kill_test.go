package reliability_test

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/internal/testdb"
	"github.com/runledger-go/runledger/internal/testdb/pgproxy"
	"github.com/runledger-go/runledger/internal/wake"
	"github.com/runledger-go/runledger/jobs"
	"github.com/runledger-go/runledger/lease"
	"github.com/runledger-go/runledger/replay"
)

// These tests terminate the backend of an operation (pg_terminate_backend
// from another connection) at one exact step of its transaction, or lose
// the reply to its COMMIT, then check three things: the caller's error is
// classified (transient for a statement that failed, commit-unconfirmed for
// a COMMIT), the database holds all of the operation or none of it, and
// repeating the same request converges to exactly one result.
//
// Exact steps come from the library's failpoints (the hook runs on the
// operation's goroutine between two statements and kills the backend
// before returning) or from a lock the test holds, which the step waits on
// until pg_locks shows it waiting. COMMIT is made to wait by a deferred
// constraint trigger that takes an advisory lock the test holds.

// failure is what the caller of a killed operation must see.
type failure int

const (
	failTransient          failure = iota // a statement failed: category transient
	failCommitUnconfirmed                 // the library's COMMIT failed
	failCallerCommitFailed                // the caller's own COMMIT failed (Tx entry point)
)

// killPoint is one place to kill an operation.
type killPoint struct {
	name string
	// hook, if set, is a failpoint at which the backend is killed.
	hook string
	// waitOn, if set, prepares a lock the operation will wait for (and
	// returns its release); the backend is killed once it waits on a lock
	// of type lockType.
	waitOn   func(e *env, sourceID uuid.UUID) (release func())
	lockType string
	// lostReply: instead of a kill, the proxy swallows the reply to
	// COMMIT, which has landed.
	lostReply bool
	// afterResult (with waitOn): the operation runs through a proxy that
	// records the server's replies, and the test checks that the kill
	// came after the insert's result: the connection's command tags are
	// exactly these, the last the insert's, and the termination (57P01)
	// follows it, with no COMMIT tag.
	afterResult []string
	want        failure
}

var gateKey int64 = 0x726c6761 // "rlga"

func holdSource(e *env, sourceID uuid.UUID) func() {
	return e.holdRow("job_queue", "id = $1", sourceID)
}

// holdDefinition holds the job type's definition FOR UPDATE: the replay
// insert reads it FOR SHARE and waits.
func holdDefinition(e *env, _ uuid.UUID) func() {
	return e.holdRow("job_definitions", "job_type = $1", "email")
}

func gateReplayCommit(e *env, _ uuid.UUID) func() {
	return e.commitGate("job_replays", "", gateKey)()
}

var ownedReplayKillPoints = []killPoint{
	{name: "after BEGIN", hook: "txn/after-begin", want: failTransient},
	{name: "after the lineage lookup", hook: "replay/after-lookup", want: failTransient},
	{name: "before the source lock", hook: "replay/before-source-lock", want: failTransient},
	{name: "waiting for the source lock", waitOn: holdSource, lockType: "", want: failTransient},
	{name: "after the source lock", hook: "replay/after-source-lock", want: failTransient},
	{name: "while the insert waits", waitOn: holdDefinition, want: failTransient},
	// SucceededJob sends BEGIN to COMMIT in one batch. Both failpoints split
	// it between the insert's result and COMMIT: the connection is lost
	// once the insert's result has arrived, which the client cannot tell
	// from a COMMIT that ran, so commit-unconfirmed (here nothing was
	// written, and the retry inserts).
	{name: "after the insert result, at after-insert", hook: "replay/after-insert", want: failCommitUnconfirmed},
	{name: "after the insert result, at before-commit", hook: "txn/before-commit", want: failCommitUnconfirmed},
	// The insert has run and its result is on its way; COMMIT, right
	// behind it in the batch, waits in the deferred trigger when the
	// backend is killed: the COMMIT failed, its fate unknown to the caller.
	{name: "after the insert result, while COMMIT waits", waitOn: gateReplayCommit, lockType: "advisory",
		// BEGIN, the lookup, the lock, the second lookup (no lineage), the
		// classification read, the insert (one row), the workers' wake-up
		// (wake.Always: sent every time).
		afterResult: []string{"BEGIN", "SELECT 1", "SELECT 1", "SELECT 0", "SELECT 1", "SELECT 1", "SELECT 1"},
		want:        failCommitUnconfirmed},
	{name: "COMMIT landed, reply lost", lostReply: true, want: failCommitUnconfirmed},
}

// TestReplayKilledAtEveryStep kills replay.SucceededJob at every step of
// its transaction.
func TestReplayKilledAtEveryStep(t *testing.T) {
	t.Parallel()
	t.Cleanup(wake.Always())
	for _, kp := range ownedReplayKillPoints {
		kp := kp
		t.Run(kp.name, func(t *testing.T) {
			t.Parallel()
			ctx := testdb.Context(t)
			e := newEnv(t)
			sourceID := testdb.Seed(t, e.admin, testdb.Succeeded(runledger.Global()))
			before := takeSnapshot(t, e.admin)
			r := req(sourceID, "retry-key", "operator retry")

			pool, err := runToKillPoint(t, ctx, e, kp, sourceID, func(ctx context.Context, pool *pgxpool.Pool) error {
				_, err := replay.SucceededJob(ctx, pool, r)
				return err
			})
			checkFailure(t, kp.want, err)

			if kp.lostReply {
				// The commit landed: the replay is complete and consistent.
				id := checkOneReplay(t, e.admin, sourceID, r.Key, r.Reason, 1)
				got := testdb.MustReplayed(t)(replay.SucceededJob(ctx, pool, r))
				if got.Disposition != runledger.DispositionExisting || got.Replay.JobID != id {
					t.Fatalf("retry after a lost COMMIT reply got %+v, want Existing %s", got, id)
				}
			} else {
				checkNothingWritten(t, e.admin, before)
				got := testdb.MustReplayed(t)(replay.SucceededJob(ctx, pool, r))
				if got.Disposition != runledger.DispositionInserted {
					t.Fatalf("retry got %+v, want Inserted", got)
				}
				if id := checkOneReplay(t, e.admin, sourceID, r.Key, r.Reason, 1); id != got.Replay.JobID {
					t.Fatalf("retry returned %s, the ledger holds %s", got.Replay.JobID, id)
				}
			}
			// Retrying again changes nothing.
			again := testdb.MustReplayed(t)(replay.SucceededJob(ctx, pool, r))
			if again.Disposition != runledger.DispositionExisting {
				t.Fatalf("second retry %+v, want Existing", again)
			}
			checkOneReplay(t, e.admin, sourceID, r.Key, r.Reason, 1)
			checkSourceUnchanged(t, e.admin, before, sourceID)
		})
	}
}

// checkFailure checks the caller's error against the kill point's class.
func checkFailure(t testing.TB, want failure, err error) {
	t.Helper()
	switch want {
	case failTransient:
		testdb.WantTransient(t, err)
	case failCommitUnconfirmed:
		testdb.WantCommitUnconfirmed(t, err)
	case failCallerCommitFailed:
		if err == nil {
			t.Fatal("COMMIT of a killed connection succeeded")
		}
	}
}

// checkSourceUnchanged fails unless the source row equals its snapshot.
func checkSourceUnchanged(t testing.TB, q testdb.Querier, before snapshot, sourceID uuid.UUID) {
	t.Helper()
	now := testdb.Scalar[string](t, q, `SELECT row_to_json(x)::text FROM job_queue x WHERE id = $1`, sourceID)
	for _, row := range before.jobs {
		if row == now {
			return
		}
	}
	t.Fatalf("source changed: now %s", now)
}

var txReplayKillPoints = []killPoint{
	{name: "after BEGIN", want: failTransient}, // the test kills right after its own BEGIN
	{name: "after the lineage lookup", hook: "replay/after-lookup", want: failTransient},
	{name: "waiting for the source lock", waitOn: holdSource, want: failTransient},
	{name: "after the source lock", hook: "replay/after-source-lock", want: failTransient},
	{name: "while the insert waits", waitOn: holdDefinition, want: failTransient},
	// The insert is the last statement: SucceededJobTx returns Replayed and
	// the caller's COMMIT fails.
	{name: "after the insert", hook: "replay/after-insert", want: failCallerCommitFailed},
	{name: "just before COMMIT", want: failCallerCommitFailed}, // killed after SucceededJobTx returned
	{name: "while COMMIT waits", waitOn: gateReplayCommit, lockType: "advisory", want: failCallerCommitFailed},
}

// TestReplayTxKilledAtEveryStep kills the caller's transaction around
// replay.SucceededJobTx: the caller's BEGIN and COMMIT are the test's.
func TestReplayTxKilledAtEveryStep(t *testing.T) {
	t.Parallel()
	for _, kp := range txReplayKillPoints {
		kp := kp
		t.Run(kp.name, func(t *testing.T) {
			t.Parallel()
			ctx := testdb.Context(t)
			e := newEnv(t)
			sourceID := testdb.Seed(t, e.admin, testdb.Succeeded(runledger.Global()))
			before := takeSnapshot(t, e.admin)
			r := req(sourceID, "tx-key", "tx reason")
			pool, app := e.target(nil)

			tx, err := pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(context.Background()) //nolint:errcheck
			tctx, tag := tagged(ctx)
			var opErr, commitErr error
			switch {
			case kp.name == "after BEGIN":
				e.killApp(app)
				_, opErr = replay.SucceededJobTx(tctx, tx, r)
			case kp.hook != "":
				onFailpoint(t, kp.hook, tag, func(context.Context, any) { e.killApp(app) })
				_, opErr = replay.SucceededJobTx(tctx, tx, r)
				if kp.want == failCallerCommitFailed {
					if opErr != nil {
						t.Fatalf("SucceededJobTx: %v (%s), want Replayed", opErr, testdb.Detail(opErr))
					}
					commitErr = tx.Commit(ctx)
				}
			case kp.want == failTransient && kp.waitOn != nil:
				release := kp.waitOn(e, sourceID)
				done := make(chan error, 1)
				go func() {
					_, err := replay.SucceededJobTx(ctx, tx, r)
					done <- err
				}()
				e.kill(e.waitingPID(app, kp.lockType))
				opErr = <-done
				release()
			case kp.name == "just before COMMIT":
				testdb.MustReplayed(t)(replay.SucceededJobTx(tctx, tx, r))
				e.killApp(app)
				commitErr = tx.Commit(ctx)
			default: // COMMIT waits on the gate
				release := kp.waitOn(e, sourceID)
				testdb.MustReplayed(t)(replay.SucceededJobTx(tctx, tx, r))
				done := make(chan error, 1)
				go func() { done <- tx.Commit(ctx) }()
				e.kill(e.waitingPID(app, kp.lockType))
				commitErr = <-done
				release()
			}
			if kp.want == failCallerCommitFailed {
				checkFailure(t, kp.want, commitErr)
			} else {
				checkFailure(t, kp.want, opErr)
			}
			_ = tx.Rollback(ctx)
			checkNothingWritten(t, e.admin, before)

			// The same request in a new caller transaction converges.
			tx2, err := pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			got := testdb.MustReplayed(t)(replay.SucceededJobTx(ctx, tx2, r))
			if err := tx2.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			if got.Disposition != runledger.DispositionInserted {
				t.Fatalf("retry %+v, want Inserted", got)
			}
			if id := checkOneReplay(t, e.admin, sourceID, r.Key, r.Reason, 1); id != got.Replay.JobID {
				t.Fatalf("retry returned %s, ledger holds %s", got.Replay.JobID, id)
			}
			checkSourceUnchanged(t, e.admin, before, sourceID)
		})
	}
}

// ---- keyed enqueue -----------------------------------------------------------

func keyedRequest() jobs.EnqueueRequest {
	return jobs.EnqueueRequest{Scope: runledger.Global(), JobType: "email",
		Payload: []byte(`{"to":"b@example.com"}`), IdempotencyKey: "order-42"}
}

var keyedEnqueueKillPoints = []killPoint{
	{name: "after BEGIN", hook: "txn/after-begin", want: failTransient},
	{name: "while the insert waits", waitOn: func(e *env, _ uuid.UUID) func() {
		// The insert reads the job type's definition FOR SHARE.
		return e.holdRow("job_definitions", "job_type = $1", "email")
	}, want: failTransient},
	{name: "after the insert, before COMMIT", hook: "txn/before-commit", want: failCommitUnconfirmed},
	{name: "while COMMIT waits", waitOn: func(e *env, _ uuid.UUID) func() {
		return e.commitGate("job_queue", "", gateKey)()
	}, lockType: "advisory", want: failCommitUnconfirmed},
	{name: "COMMIT landed, reply lost", lostReply: true, want: failCommitUnconfirmed},
}

// TestKeyedEnqueueKilledAtEveryStep kills jobs.Enqueue with an idempotency
// key at every step of its transaction; retrying the same request
// converges to one job with one ENQUEUED event.
func TestKeyedEnqueueKilledAtEveryStep(t *testing.T) {
	t.Parallel()
	for _, kp := range keyedEnqueueKillPoints {
		kp := kp
		t.Run(kp.name, func(t *testing.T) {
			t.Parallel()
			ctx := testdb.Context(t)
			e := newEnv(t)
			testdb.DefineType(t, e.admin, "email")
			before := takeSnapshot(t, e.admin)
			r := keyedRequest()

			pool, err := runToKillPoint(t, ctx, e, kp, uuid.Nil, func(ctx context.Context, pool *pgxpool.Pool) error {
				_, err := jobs.Enqueue(ctx, pool, r)
				return err
			})
			checkFailure(t, kp.want, err)
			if !kp.lostReply {
				checkNothingWritten(t, e.admin, before)
			}

			res, err := jobs.Enqueue(ctx, pool, r)
			if err != nil {
				t.Fatalf("retry: %v (%s)", err, testdb.Detail(err))
			}
			wantDisp := runledger.DispositionInserted
			if kp.lostReply {
				wantDisp = runledger.DispositionExisting
			}
			if res.Disposition != wantDisp {
				t.Fatalf("retry disposition %s, want %s", res.Disposition, wantDisp)
			}
			again, err := jobs.Enqueue(ctx, pool, r)
			if err != nil || again.Disposition != runledger.DispositionExisting || again.Job.ID != res.Job.ID {
				t.Fatalf("second retry %+v, %v; want Existing %s", again, err, res.Job.ID)
			}
			checkOneKeyedJob(t, e.admin, res.Job.ID, r.IdempotencyKey)
		})
	}
}

// checkOneKeyedJob verifies that exactly one job holds key and that the
// whole ledger is that job and its one ENQUEUED event.
func checkOneKeyedJob(t testing.TB, q testdb.Querier, id uuid.UUID, key string) {
	t.Helper()
	if n := testdb.Scalar[int64](t, q, `SELECT count(*) FROM job_queue`); n != 1 {
		t.Fatalf("%d jobs, want 1", n)
	}
	if got := testdb.Scalar[uuid.UUID](t, q, `SELECT id FROM job_queue WHERE idempotency_key = $1`, key); got != id {
		t.Fatalf("key held by %s, want %s", got, id)
	}
	if got := testdb.EventTypes(t, q, id); len(got) != 1 || got[0] != "ENQUEUED" {
		t.Fatalf("events %v, want one ENQUEUED", got)
	}
	if n := testdb.Scalar[int64](t, q, `SELECT count(*) FROM job_events`); n != 1 {
		t.Fatalf("%d events in all, want 1", n)
	}
}

// ---- complete ----------------------------------------------------------------

// leasedJob enqueues and claims one job through the admin pool and returns
// the request that completes it.
func leasedJob(t *testing.T, ctx context.Context, e *env) lease.CompleteRequest {
	t.Helper()
	testdb.DefineType(t, e.admin, "email")
	cr := testdb.CompleteRequest(testdb.Leased(t, ctx, e.admin, jobs.EnqueueRequest{}))
	cr.Output = []byte(`{"ok":true}`)
	return cr
}

// TestCompleteKilled kills lease.Complete, a single statement on the pool,
// while it waits for the job's row lock and while its (implicit) COMMIT
// waits, and loses the reply of a completion that landed. A killed
// backend reports its termination (57P01) before the statement committed:
// transient, nothing written. A reply lost after the statement was sent
// is an unknown outcome: commit-unconfirmed. Complete is compare-and-set
// on the lease, so the retry is safe either way: it completes the job,
// or, when the first call had landed, reports a lease mismatch and the
// job is SUCCEEDED exactly once.
func TestCompleteKilled(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name      string
		waitOn    func(e *env, job uuid.UUID) func()
		lockType  string
		lostReply bool
	}{
		{name: "while it waits for the row lock", waitOn: func(e *env, job uuid.UUID) func() {
			return e.holdRow("job_queue", "id = $1", job)
		}},
		{name: "while its commit waits", waitOn: func(e *env, _ uuid.UUID) func() {
			return e.commitGate("job_events", "NEW.event_type = 'SUCCEEDED'", gateKey)()
		}, lockType: "advisory"},
		{name: "completion landed, reply lost", lostReply: true},
	}
	for _, c := range cases {
		c := c
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ctx := testdb.Context(t)
			e := newEnv(t)
			cr := leasedJob(t, ctx, e)
			before := takeSnapshot(t, e.admin)

			var err error
			if c.lostReply {
				proxy, pool, _ := e.proxied(nil)
				armLostWrite(t, ctx, proxy, pool)
				_, err = lease.Complete(ctx, pool, cr)
				if proxy.Dropped() != 1 {
					t.Fatalf("the proxy swallowed %d replies, want 1", proxy.Dropped())
				}
				testdb.WantCommitUnconfirmed(t, err)
				// It landed: completed once. The retry says so as a lease
				// mismatch and writes nothing.
				checkCompletedOnce(t, e.admin, cr.JobID)
				_, err = lease.Complete(ctx, e.admin, cr)
				if !errors.Is(err, runledger.CodeLeaseMismatch) {
					t.Fatalf("retry after a landed completion: %v, want lease mismatch", err)
				}
				checkCompletedOnce(t, e.admin, cr.JobID)
				return
			}

			pool, app := e.target(nil)
			release := c.waitOn(e, cr.JobID)
			done := make(chan error, 1)
			go func() {
				_, err := lease.Complete(ctx, pool, cr)
				done <- err
			}()
			e.kill(e.waitingPID(app, c.lockType))
			err = <-done
			release()
			testdb.WantTransient(t, err)
			checkNothingWritten(t, e.admin, before)

			job, err := lease.Complete(ctx, pool, cr)
			if err != nil || job.Status != runledger.JobStatusSucceeded {
				t.Fatalf("retry: %+v, %v", job, err)
			}
			checkCompletedOnce(t, e.admin, cr.JobID)
			if _, err := lease.Complete(ctx, pool, cr); !errors.Is(err, runledger.CodeLeaseMismatch) {
				t.Fatalf("second retry: %v, want lease mismatch", err)
			}
			checkCompletedOnce(t, e.admin, cr.JobID)
		})
	}
}

func checkCompletedOnce(t testing.TB, q testdb.Querier, id uuid.UUID) {
	t.Helper()
	if st := testdb.Scalar[string](t, q, `SELECT status::text FROM job_queue WHERE id = $1`, id); st != "SUCCEEDED" {
		t.Fatalf("job is %s, want SUCCEEDED", st)
	}
	got := testdb.EventTypes(t, q, id)
	want := []string{"ENQUEUED", "LEASED", "SUCCEEDED"}
	if len(got) != len(want) {
		t.Fatalf("events %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("events %v, want %v", got, want)
		}
	}
}

// runToKillPoint runs op once on a target pool and kills its backend at the
// kill point: at a failpoint (the hook fires only for this call, tagged
// through its context), while it waits on a lock waitOn prepares (lockArg
// is passed to waitOn), or, for a lost reply, by a proxy that swallows the
// reply to COMMIT. It returns the pool (for retries) and op's error.
func runToKillPoint(t *testing.T, ctx context.Context, e *env, kp killPoint, lockArg uuid.UUID,
	op func(context.Context, *pgxpool.Pool) error) (*pgxpool.Pool, error) {
	t.Helper()
	var pool *pgxpool.Pool
	var app string
	var proxy *pgproxy.Proxy
	var mu sync.Mutex
	var replies []pgproxy.Message
	switch {
	case kp.lostReply:
		proxy, pool, app = e.proxied(nil)
	case kp.afterResult != nil:
		_, pool, app = e.proxied(func(m pgproxy.Message) {
			mu.Lock()
			defer mu.Unlock()
			replies = append(replies, m)
		})
		// The pool first learns whether the database runs Citus (a lease
		// recovery with nothing to recover asks), so that the tags
		// recorded are the operation's own.
		if _, err := lease.RecoverExpiredLeases(ctx, pool, 1); err != nil {
			t.Fatalf("learn whether the database runs Citus: %v", err)
		}
		mu.Lock()
		replies = nil
		mu.Unlock()
	default:
		pool, app = e.target(nil)
	}
	tctx, tag := tagged(ctx)
	switch {
	case kp.hook != "":
		onFailpoint(t, kp.hook, tag, func(context.Context, any) { e.killApp(app) })
		return pool, op(tctx, pool)
	case kp.lostReply:
		onFailpoint(t, "txn/before-commit", tag, func(context.Context, any) { proxy.DropReply("COMMIT") })
		err := op(tctx, pool)
		if proxy.Dropped() != 1 {
			t.Fatalf("the proxy swallowed %d replies, want 1", proxy.Dropped())
		}
		return pool, err
	default:
		release := kp.waitOn(e, lockArg)
		done := make(chan error, 1)
		go func() { done <- op(ctx, pool) }()
		e.kill(e.waitingPID(app, kp.lockType))
		err := <-done
		release()
		if kp.afterResult != nil {
			mu.Lock()
			defer mu.Unlock()
			checkKilledAfterResult(t, replies, kp.afterResult)
		}
		return pool, err
	}
}

// checkKilledAfterResult fails unless the command tags the server sent on
// the connection are exactly tags and the termination's ErrorResponse
// (57P01) is the last message, after the last command's CommandComplete
// with nothing but the next statement's start in between: that command's
// result was sent before the kill, and nothing after it completed.
func checkKilledAfterResult(t testing.TB, replies []pgproxy.Message, tags []string) {
	t.Helper()
	var got []string
	for _, m := range replies {
		if m.Tag() != "" {
			got = append(got, m.Tag())
		}
	}
	if !reflect.DeepEqual(got, tags) {
		t.Fatalf("command tags %q, want %q", got, tags)
	}
	end := len(replies) - 1
	if end < 1 || replies[end].SQLState() != "57P01" {
		t.Fatalf("the connection did not end with the termination (57P01)")
	}
	// In between, only the next statement's start: ParseComplete,
	// BindComplete, NoData (its Describe), or a notice.
	for i := end - 1; i >= 0 && replies[i].Type != 'C'; i-- {
		if !strings.ContainsRune("12nN", rune(replies[i].Type)) {
			t.Fatalf("between the last command's result and the termination came a %c message", replies[i].Type)
		}
	}
}
