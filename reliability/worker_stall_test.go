package reliability_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/runledger-go/runledger/internal/testdb"
	"github.com/runledger-go/runledger/internal/testdb/pgproxy"
	"github.com/runledger-go/runledger/internal/txn"
	"github.com/runledger-go/runledger/worker"
)

// TestWorkerBehindAStalledNetworkGivesUpItsLease black-holes a running
// worker's network (package pgproxy's Stall: nothing is forwarded, nothing
// answers) while its handler runs. Its heartbeats can no longer land, and
// once its lease has ended the worker must give the attempt up: cancel the
// handler with the lost-lease cause and write nothing, although the
// handler returns success. A second worker then recovers the job and
// completes it once. A heartbeat that waits forever on the dead network
// would leave the handler running beside the next attempt: this test
// would then time out waiting for the cancel.
func TestWorkerBehindAStalledNetworkGivesUpItsLease(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	createEffects(t, e.admin)
	defineTypes(t, e.admin, map[string]int32{typeBlock: 3})
	j := enqueueN(t, e.admin, typeBlock, 1)[0]

	addr, err := pgproxy.TargetAddr(e.url)
	if err != nil {
		t.Fatal(err)
	}
	proxy, err := pgproxy.Start(addr, pgproxy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.Close)
	pool := openPool(t, proxy.ConnString(e.url), "rl-stalled", 8, nil)
	started := make(chan struct{}, 1)
	ended := make(chan error, 1)
	const lease = time.Second
	stalled := startWorker(t, pool, worker.Config{WorkerID: "stalled", Lease: lease, HeartbeatInterval: lease / 4,
		PollInterval: 20 * time.Millisecond, RecoveryInterval: -1, DisableListen: true},
		func(w *worker.Worker) error {
			return registerTestTypes(w, pool, true, func(worker.Job[json.RawMessage]) { started <- struct{}{} },
				func(_ worker.Job[json.RawMessage], cause error) { ended <- cause })
		})
	<-started
	proxy.Stall()
	stalledAt := time.Now()
	e.waitFor("the stalled worker's lease to expire", func() bool {
		return testdb.Scalar[bool](t, e.admin, `SELECT lease_expires_at < clock_timestamp() FROM job_queue WHERE id = $1`, j.ID)
	})
	// The bound: the lease, one heartbeat round that waits out its
	// deadline, the engine's grace for a stalled cancel, room for a
	// loaded machine.
	bound := lease + lease/4 + 10*time.Second
	select {
	case cause := <-ended:
		if cause == nil || !strings.Contains(cause.Error(), lostLease) {
			t.Errorf("the handler's context ended with cause %v, want the lost lease", cause)
		}
		t.Logf("the handler was canceled %s after the stall", time.Since(stalledAt).Round(time.Millisecond))
	case <-time.After(time.Until(stalledAt.Add(bound))):
		proxy.Close() // let the worker's calls return, so that it can stop
		t.Fatalf("the handler still runs %s after the network stalled, its lease (%s) long expired: the worker never gave it up", bound, lease)
	}
	f := stalled.waitFinished("the attempt given up", func(f worker.Finished) bool { return f.Job.ID == j.ID })
	if f.Outcome != worker.OutcomeLost {
		t.Errorf("the stalled worker reported %s, want lost", f.Outcome)
	}

	second := secondWorker(t, e, "second", 5*time.Second, 50*time.Millisecond)
	second.waitFinished("the job completed at attempt 2", func(f worker.Finished) bool {
		return f.Job.ID == j.ID && f.Outcome == worker.OutcomeSucceeded && f.Job.Attempt == 2
	})
	proxy.Close()
	if err := stalled.stop(); err != nil {
		t.Fatal(err)
	}
	if err := second.stop(); err != nil {
		t.Fatal(err)
	}
	if got, want := history(t, e.admin, j.ID), "ENQUEUED LEASED@1 RETRY_SCHEDULED@1:LEASE_EXPIRED LEASED@2 SUCCEEDED@2"; got != want {
		t.Errorf("events %s, want %s", got, want)
	}
	if got, want := effects(t, e.admin, j.ID), "1:stalled,2:second"; got != want {
		t.Errorf("side effects %s, want %s", got, want)
	}
	checkNoAttemptFinishedTwice(t, e.admin)
}

// TestWorkerShutdownBehindAStalledNetworkKeepsItsTimeout ends Run's
// context while the worker's network is black-holed (pgproxy's Stall) and
// a handler runs: the handler is canceled at the shutdown timeout, its
// outcome cannot be written, the fetcher's claim and the heartbeats get no
// answer. Run must still return within the shutdown timeout plus the
// worker's grace (the wait for canceled handlers, which the last database
// calls share) plus the engine's Grace for a stalled cancel. The lease is
// long, so that only the shutdown bounds the calls. A worker whose calls
// have no deadline never returns here: the test then closes the proxy, so
// that it can.
func TestWorkerShutdownBehindAStalledNetworkKeepsItsTimeout(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	createEffects(t, e.admin)
	defineTypes(t, e.admin, map[string]int32{typeBlock: 3})
	j := enqueueN(t, e.admin, typeBlock, 1)[0]

	addr, err := pgproxy.TargetAddr(e.url)
	if err != nil {
		t.Fatal(err)
	}
	proxy, err := pgproxy.Start(addr, pgproxy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.Close)
	pool := openPool(t, proxy.ConnString(e.url), "rl-stalled-stop", 8, nil)
	started := make(chan struct{}, 1)
	const shutdownTimeout = 500 * time.Millisecond
	w := startWorker(t, pool, worker.Config{WorkerID: "stalled-stop", Lease: time.Minute, ShutdownTimeout: shutdownTimeout,
		PollInterval: 20 * time.Millisecond, RecoveryInterval: 50 * time.Millisecond},
		func(w *worker.Worker) error {
			return registerTestTypes(w, pool, true, func(worker.Job[json.RawMessage]) { started <- struct{}{} }, nil)
		})
	<-started
	proxy.Stall()
	time.Sleep(100 * time.Millisecond) // let the fetcher and the recovery meet the stall
	stoppedAt := time.Now()
	returned := make(chan error, 1)
	go func() { returned <- w.stop() }()
	bound := shutdownTimeout + worker.ShutdownGrace + txn.Grace + 3*time.Second
	select {
	case err := <-returned:
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("Run returned %s after its context ended", time.Since(stoppedAt).Round(time.Millisecond))
	case <-time.After(bound):
		proxy.Close()
		<-returned
		t.Fatalf("Run did not return within %s of its context's end behind a stalled network (shutdown timeout %s)", bound, shutdownTimeout)
	}
	// The attempt's outcome could not be written: the job is still leased
	// (recovered once the lease expires), and the worker reported it lost.
	if got := testdb.Scalar[string](t, e.admin, `SELECT status::text FROM job_queue WHERE id = $1`, j.ID); got != "LEASED" {
		t.Errorf("the job is %s, want still LEASED (nothing could be written)", got)
	}
	var lost bool
	for _, f := range w.outcomes() {
		if f.Job.ID == j.ID && f.Outcome == worker.OutcomeLost {
			lost = true
		}
	}
	if !lost {
		t.Errorf("the worker did not report the attempt lost: %+v", w.outcomes())
	}
}
