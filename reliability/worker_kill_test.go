package reliability_test

import (
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/internal/testdb"
	"github.com/runledger-go/runledger/jobs"
	"github.com/runledger-go/runledger/worker"
)

// The worker runtime's faults: a worker process killed with SIGKILL mid-job,
// one paused (SIGSTOP) past its lease, one whose network stops answering,
// one stopped with SIGTERM. Each worker child is the test binary started
// again (see worker_child_test.go); the test orders events by what it reads
// in the database and in the child's reports, never by sleeping.

// lostLease is the text of the cause a worker gives a handler whose lease
// is gone.
const lostLease = "lease is no longer held"

// secondWorker runs an in-process worker on the test's database that
// recovers expired leases every recovery interval and completes the test
// types at once.
func secondWorker(t *testing.T, e *env, id string, lease, recovery time.Duration) *runner {
	t.Helper()
	pool := openPool(t, e.url, "rl-second-"+testdb.RandomHex(4), 12, nil)
	return startWorker(t, pool, worker.Config{WorkerID: id, Lease: lease, RecoveryInterval: recovery, PollInterval: 20 * time.Millisecond},
		func(w *worker.Worker) error { return registerTestTypes(w, pool, false, nil, nil) })
}

// TestWorkerProcessKilledMidJob kills a worker process (SIGKILL) while its
// handlers run: four jobs of three attempts and two of one attempt are
// mid-handler (each has written its side effect and blocks), four quick
// jobs are done. A second worker that recovers expired leases every 100 ms
// then takes over. Every job ends terminal: the blocked jobs with attempts
// left SUCCEEDED at attempt 2 by the second worker, the one-attempt jobs
// DEAD_LETTERED by the recovery (LEASE_EXPIRED), the quick ones as the
// killed worker left them; none stays LEASED; no attempt has two
// SUCCEEDED events or two side effects, and the killed worker completed
// nothing after its attempt was taken back.
//
// The child's lease is 2 s on one server and 6 s on Citus, the second
// worker's 5 s: on a loaded Citus cluster a distributed heartbeat or
// completion outlasted 2 s, so the child lost its quick jobs' leases before
// the kill, and a one-second lease ran out between the second worker's
// claim and its completion.
func TestWorkerProcessKilledMidJob(t *testing.T) {
	if testing.Short() {
		t.Skip("worker process test: skipped under -short")
	}
	t.Parallel()
	e := newEnv(t)
	createEffects(t, e.admin)
	defineTypes(t, e.admin, map[string]int32{typeBlock: 3, typeBlockLast: 1, typeQuick: 3})
	blocked := enqueueN(t, e.admin, typeBlock, 4)
	last := enqueueN(t, e.admin, typeBlockLast, 2)
	quick := enqueueN(t, e.admin, typeQuick, 4)

	childLease := 2 * time.Second
	if testdb.Citus() {
		childLease = 6 * time.Second
	}
	child := startWorkerChild(t, e.url, childConfig{Lease: childLease, Concurrency: 16})
	cid := child.cfg.WorkerID
	e.waitFor("the child to start every blocking job and finish every quick one", func() bool {
		return testdb.Scalar[int64](e.t, e.admin, `SELECT count(*) FROM rl_effects e JOIN job_queue q ON q.id = e.job_id
			WHERE q.job_type IN ($1, $2) AND e.worker_id = $3`, typeBlock, typeBlockLast, cid) == 6 &&
			countWhere(t, e.admin, `job_type = $1 AND status = 'SUCCEEDED'`, typeQuick) == 4
	})
	if n := countWhere(t, e.admin, `status = 'LEASED' AND worker_id = $1`, cid); n != 6 {
		t.Fatalf("%d jobs leased to the child before the kill, want the 6 blocking ones", n)
	}
	child.signal(syscall.SIGKILL)
	killedAt := time.Now()
	if err := child.wait(); !killedBy(err, syscall.SIGKILL) {
		t.Fatalf("the child exited with %v, want killed by SIGKILL", err)
	}
	e.waitFor("the killed worker's backends to leave the server", func() bool {
		return testdb.Scalar[int64](t, e.admin, `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1`, child.cfg.App) == 0
	})

	const recovery = 100 * time.Millisecond
	second := secondWorker(t, e, "second", 5*time.Second, recovery)
	e.waitFor("every job to end terminal", func() bool {
		return countWhere(t, e.admin, `status NOT IN ('SUCCEEDED', 'DEAD_LETTERED')`) == 0
	})
	doneAt := time.Now()
	if err := second.stop(); err != nil {
		t.Fatal(err)
	}

	for _, j := range blocked {
		if got, want := history(t, e.admin, j.ID), "ENQUEUED LEASED@1 RETRY_SCHEDULED@1:LEASE_EXPIRED LEASED@2 SUCCEEDED@2"; got != want {
			t.Errorf("blocked job %s: events %s, want %s", j.ID, got, want)
		}
		if got, want := effects(t, e.admin, j.ID), "1:"+cid+",2:second"; got != want {
			t.Errorf("blocked job %s: side effects %s, want %s", j.ID, got, want)
		}
		if by := outputBy(t, e.admin, j.ID); by != "second" {
			t.Errorf("blocked job %s completed by %q, want the second worker", j.ID, by)
		}
	}
	for _, j := range last {
		if got, want := history(t, e.admin, j.ID), "ENQUEUED LEASED@1 DEAD_LETTERED@1:LEASE_EXPIRED"; got != want {
			t.Errorf("one-attempt job %s: events %s, want %s", j.ID, got, want)
		}
		if got, want := effects(t, e.admin, j.ID), "1:"+cid; got != want {
			t.Errorf("one-attempt job %s: side effects %s, want %s", j.ID, got, want)
		}
	}
	for _, j := range quick {
		if got, want := history(t, e.admin, j.ID), "ENQUEUED LEASED@1 SUCCEEDED@1"; got != want {
			t.Errorf("quick job %s: events %s, want %s", j.ID, got, want)
		}
		if got, want := effects(t, e.admin, j.ID), "1:"+cid; got != want {
			t.Errorf("quick job %s: side effects %s, want %s", j.ID, got, want)
		}
	}
	checkNoAttemptFinishedTwice(t, e.admin)
	for _, f := range second.outcomes() {
		if f.Outcome != worker.OutcomeSucceeded {
			t.Errorf("the second worker reported %s for job %s (%v)", f.Outcome, f.Job.ID, f.Err)
		}
	}
	if n := len(second.outcomes()); n != len(blocked) {
		t.Errorf("the second worker finished %d attempts, want %d", n, len(blocked))
	}
	// The recoveries came within the child's lease and one recovery
	// interval of the kill (its last heartbeat was before the kill), with
	// room for a loaded machine.
	lastRecovery := testdb.Scalar[time.Time](t, e.admin, `SELECT max(occurred_at) FROM job_events WHERE payload->>'failure_kind' = 'LEASE_EXPIRED'`)
	if bound := childLease + recovery + 5*time.Second; lastRecovery.Sub(killedAt) > bound {
		t.Errorf("the last lease was recovered %s after the kill, want within %s", lastRecovery.Sub(killedAt), bound)
	}
	t.Logf("kill to last recovery %s, kill to every job terminal %s (child lease %s, recovery every %s, retry delay 1 s)",
		lastRecovery.Sub(killedAt).Round(time.Millisecond), doneAt.Sub(killedAt).Round(time.Millisecond), childLease, recovery)
}

// TestPausedWorkerProcessIsFencedOff pauses a worker process (SIGSTOP)
// while its handler runs, until its lease has expired by the database
// clock; a second worker recovers the job and completes it at attempt 2.
// Resumed (SIGCONT), the first worker's next heartbeat is refused: its
// handler's context ends with the lost-lease cause, the handler returns
// success all the same, and the worker writes nothing for the attempt
// (OutcomeLost): the job keeps the second worker's completion, one
// SUCCEEDED event, at attempt 2.
func TestPausedWorkerProcessIsFencedOff(t *testing.T) {
	if testing.Short() {
		t.Skip("worker process test: skipped under -short")
	}
	t.Parallel()
	e := newEnv(t)
	createEffects(t, e.admin)
	defineTypes(t, e.admin, map[string]int32{typeBlock: 3})
	j := enqueueN(t, e.admin, typeBlock, 1)[0]

	child := startWorkerChild(t, e.url, childConfig{Lease: time.Second, Concurrency: 2})
	cid := child.cfg.WorkerID
	child.waitLine("the handler to start", func(l childLine) bool { return l.Event == "started" && l.Job == j.ID })
	child.signal(syscall.SIGSTOP)
	e.waitFor("the paused worker's lease to expire", func() bool {
		return testdb.Scalar[bool](t, e.admin, `SELECT status = 'LEASED' AND lease_expires_at < clock_timestamp() FROM job_queue WHERE id = $1`, j.ID)
	})

	second := secondWorker(t, e, "second", 5*time.Second, 50*time.Millisecond)
	second.waitFinished("the job completed at attempt 2", func(f worker.Finished) bool {
		return f.Job.ID == j.ID && f.Outcome == worker.OutcomeSucceeded && f.Job.Attempt == 2
	})
	if err := second.stop(); err != nil {
		t.Fatal(err)
	}

	child.signal(syscall.SIGCONT)
	ended := child.waitLine("the handler's context to end", func(l childLine) bool { return l.Event == "ended" && l.Job == j.ID })
	if !strings.Contains(ended.Cause, lostLease) {
		t.Errorf("the resumed worker's handler ended with cause %q, want the lost lease", ended.Cause)
	}
	fin := child.waitLine("the attempt's outcome", func(l childLine) bool { return l.Event == "finished" && l.Job == j.ID })
	if fin.Outcome != string(worker.OutcomeLost) || fin.Attempt != 1 {
		t.Errorf("the resumed worker reported %+v, want attempt 1 lost", fin)
	}
	child.signal(syscall.SIGTERM)
	if err := child.wait(); err != nil {
		t.Fatalf("the child exited with %v after SIGTERM", err)
	}

	if got, want := history(t, e.admin, j.ID), "ENQUEUED LEASED@1 RETRY_SCHEDULED@1:LEASE_EXPIRED LEASED@2 SUCCEEDED@2"; got != want {
		t.Errorf("events %s, want %s", got, want)
	}
	if got, want := effects(t, e.admin, j.ID), "1:"+cid+",2:second"; got != want {
		t.Errorf("side effects %s, want %s", got, want)
	}
	if by := outputBy(t, e.admin, j.ID); by != "second" {
		t.Errorf("completed by %q, want the second worker", by)
	}
	checkNoAttemptFinishedTwice(t, e.admin)
}

// TestWorkerProcessSIGTERMDrainsAndHandsBack stops a worker process with
// SIGTERM while two handlers run (each waiting for a gate the test holds)
// and two more jobs are claimed but not started (the child's fetcher holds
// that claim at worker.FailpointAfterClaim until the signal). The claimed
// jobs are handed back first, PENDING at attempt 0 with no worker, while
// the running handlers still wait; the test then opens the gate, the
// handlers finish within the shutdown timeout, their completions are
// committed, and the process exits 0 leaving nothing LEASED.
func TestWorkerProcessSIGTERMDrainsAndHandsBack(t *testing.T) {
	if testing.Short() {
		t.Skip("worker process test: skipped under -short")
	}
	t.Parallel()
	e := newEnv(t)
	createEffects(t, e.admin)
	defineTypes(t, e.admin, map[string]int32{typeGate: 3, typeLater: 3})
	ctx := testdb.Context(t)
	gate, err := e.admin.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer gate.Release()
	testdb.Exec(t, gate, `SELECT pg_advisory_lock($1)`, gateLockKey)
	gated := enqueueN(t, e.admin, typeGate, 2)

	child := startWorkerChild(t, e.url, childConfig{Lease: 30 * time.Second, Concurrency: 4, ShutdownTimeout: 30 * time.Second, HoldType: typeLater})
	cid := child.cfg.WorkerID
	e.waitFor("both gated handlers to wait at the gate", func() bool {
		return testdb.Scalar[int64](t, e.admin, `SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
			WHERE a.application_name = $1 AND l.locktype = 'advisory' AND NOT l.granted`, child.cfg.App) == 2
	})
	// Both in one transaction, so that one claim takes both.
	var later []runledger.Job
	tx := testdb.Begin(t, ctx, e.admin)
	for i := 0; i < 2; i++ {
		res, err := jobs.EnqueueTx(ctx, tx, jobs.EnqueueRequest{JobType: typeLater})
		if err != nil {
			t.Fatal(err)
		}
		later = append(later, res.Job)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	child.waitLine("the fetcher to hold the claim of the later jobs", func(l childLine) bool { return l.Event == "holding" })
	if n := countWhere(t, e.admin, `job_type = $1 AND status = 'LEASED' AND worker_id = $2`, typeLater, cid); n != 2 {
		t.Fatalf("%d later jobs leased to the child, want 2", n)
	}

	child.signal(syscall.SIGTERM)
	e.waitFor("the unstarted claims to be handed back", func() bool {
		return countWhere(t, e.admin, `job_type = $1 AND status = 'PENDING' AND attempt = 0 AND worker_id IS NULL`, typeLater) == 2
	})
	if n := countWhere(t, e.admin, `job_type = $1 AND status = 'LEASED' AND worker_id = $2`, typeGate, cid); n != 2 {
		t.Fatalf("%d gated jobs still leased while their handlers wait, want 2", n)
	}
	select {
	case <-child.exited:
		t.Fatal("the child exited while its handlers were still running")
	default:
	}
	testdb.Exec(t, gate, `SELECT pg_advisory_unlock($1)`, gateLockKey)
	if err := child.wait(); err != nil {
		t.Fatalf("the child exited with %v after SIGTERM, want 0", err)
	}
	child.waitLine("Run to return", func(l childLine) bool { return l.Event == "exited" })

	for _, j := range gated {
		if got, want := history(t, e.admin, j.ID), "ENQUEUED LEASED@1 SUCCEEDED@1"; got != want {
			t.Errorf("gated job %s: events %s, want %s", j.ID, got, want)
		}
		if by := outputBy(t, e.admin, j.ID); by != cid {
			t.Errorf("gated job %s completed by %q, want the child", j.ID, by)
		}
	}
	for _, j := range later {
		if got, want := history(t, e.admin, j.ID), "ENQUEUED LEASED@1 STAGE_CHANGED@1"; got != want {
			t.Errorf("handed-back job %s: events %s, want %s", j.ID, got, want)
		}
		if got := effects(t, e.admin, j.ID); got != "" {
			t.Errorf("handed-back job %s ran: side effects %s", j.ID, got)
		}
	}
	checkNoAttemptFinishedTwice(t, e.admin)
	var finished []string
	for _, l := range child.reported() {
		if l.Event == "finished" {
			finished = append(finished, fmt.Sprintf("%s:%s", l.Job, l.Outcome))
		}
	}
	if len(finished) != 2 {
		t.Errorf("the child reported %v, want the two gated jobs succeeded", finished)
	}
}
