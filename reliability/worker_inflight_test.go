package reliability_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/runledger-go/runledger/internal/testdb"
	"github.com/runledger-go/runledger/worker"
)

// Work in flight is bounded: while the worker's outcomes cannot be
// committed (the first job's completion waits on a row lock the test
// holds), it stops claiming. The leases it holds (claimed, running, and
// finished but not committed) never exceed Concurrency, counted in the
// database each time a handler starts; once the lock goes, every job
// succeeds.
func TestWorkerStopsClaimingWhileOutcomesBackUp(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const concurrency, jobsN = 4, 30
	defineTypes(t, e.admin, map[string]int32{"gated": 3})
	js := enqueueN(t, e.admin, "gated", jobsN)
	gate := js[0].ID

	var mu sync.Mutex
	maxHeld, started := int64(0), 0
	startedCh := make(chan struct{}, jobsN*2)
	gateRunning, gateLocked := make(chan struct{}), make(chan struct{})
	pool := openPool(t, e.url, "rl-inflight", 8, nil)
	r := startWorker(t, pool, worker.Config{Concurrency: concurrency, PollInterval: 20 * time.Millisecond},
		func(w *worker.Worker) error {
			return worker.Register(w, "gated", func(ctx context.Context, j worker.Job[json.RawMessage]) (any, error) {
				held := testdb.Scalar[int64](t, e.admin, `SELECT count(*) FROM job_queue WHERE status = 'LEASED' AND worker_id = $1`, *j.Record.WorkerID)
				mu.Lock()
				maxHeld, started = max(maxHeld, held), started+1
				mu.Unlock()
				startedCh <- struct{}{}
				if j.Record.ID == gate {
					close(gateRunning)
					<-gateLocked
				}
				return nil, nil
			})
		})
	<-gateRunning
	tx := testdb.Begin(t, context.Background(), e.admin)
	testdb.LockJob(t, tx, gate, "UPDATE")
	close(gateLocked)
	// The committer waits on the lock with the gate's completion. A worker
	// that frees a slot when the handler returns claims on and on; one
	// that waits for the commit starts fewer than Concurrency more (the
	// slots not held by the gate's attempt).
	testdb.WaitBlocked(t, e.admin, 0)
	mu.Lock()
	before := started
	mu.Unlock()
	window := time.After(2 * time.Second)
observe:
	for {
		mu.Lock()
		n := started - before
		mu.Unlock()
		if n >= concurrency {
			break
		}
		select {
		case <-startedCh:
		case <-window:
			break observe
		}
	}
	mu.Lock()
	n := started - before
	mu.Unlock()
	if n >= concurrency {
		t.Errorf("%d handlers started while the first outcome could not be committed, want fewer than Concurrency %d", n, concurrency)
	}
	if err := tx.Rollback(context.Background()); err != nil {
		t.Fatal(err)
	}
	e.waitFor("every job to succeed", func() bool { return countWhere(t, e.admin, "status = 'SUCCEEDED'") == jobsN })
	_ = r.stop()
	mu.Lock()
	defer mu.Unlock()
	if maxHeld > concurrency {
		t.Errorf("the worker held %d leases at once, want at most Concurrency %d", maxHeld, concurrency)
	}
}
