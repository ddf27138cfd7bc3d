package reliability_test

import (
	"context"
	"encoding/json"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/internal/testdb"
	"github.com/runledger-go/runledger/jobs"
	"github.com/runledger-go/runledger/worker"
)

// No job runs twice on healthy workers: three workers, each on a pool of
// its own, run 2,000 short jobs of four tenants with short leases (2 s,
// 6 s on Citus, heartbeats every sixth of it, recovery every second). The workers' own
// statements never deadlock (pg_stat_database.deadlocks does not move), no
// job has a second attempt, and every job has exactly one SUCCEEDED event.
func TestWorkersUnderLoadNeverDeadlockOrRunAJobTwice(t *testing.T) {
	if testing.Short() {
		t.Skip("a load run of 2,000 jobs")
	}
	e := newEnv(t)
	const jobsN, workersN = 2000, 3
	defineTypes(t, e.admin, map[string]int32{"short": 3})
	tenants := make([]runledger.Scope, 4)
	for i := range tenants {
		tenants[i] = runledger.Organization(uuid.Must(uuid.NewV7()))
	}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := g; i < jobsN; i += 8 {
				if _, err := jobs.Enqueue(context.Background(), e.admin, jobs.EnqueueRequest{JobType: "short", Scope: tenants[i%len(tenants)],
					Payload: json.RawMessage(`{}`)}); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	deadlocks := func() int64 {
		testdb.Exec(t, e.admin, `SELECT pg_stat_clear_snapshot()`)
		return testdb.Scalar[int64](t, e.admin, `SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()`)
	}
	before := deadlocks()

	// On Citus a heartbeat is a distributed transaction: beside the rest of
	// the suite one took longer than a 2 s lease leaves it, the job was
	// recovered and ran again. The lease is longer there; the guarantee
	// under test (a heartbeat that lands keeps the job) is the same.
	leaseFor := 2 * time.Second
	if testdb.Citus() {
		leaseFor = 6 * time.Second
	}
	var finished atomic.Int64
	runners := make([]*runner, workersN)
	var pools []*pgxpool.Pool
	for i := range runners {
		pool := openPool(t, e.url, "rl-load-"+testdb.RandomHex(4), 8, nil)
		pools = append(pools, pool)
		runners[i] = startWorker(t, pool, worker.Config{Concurrency: 8, Lease: leaseFor, HeartbeatInterval: leaseFor / 6,
			RecoveryInterval: time.Second, PollInterval: 50 * time.Millisecond,
			OnFinished: func(worker.Finished) { finished.Add(1) }},
			func(w *worker.Worker) error {
				return worker.Register(w, "short", func(ctx context.Context, _ worker.Job[json.RawMessage]) (any, error) {
					return map[string]bool{"ok": true}, nil
				})
			})
	}
	// Two minutes, not WaitFor's 30 s: on Citus every statement is a hop
	// more, and 2,000 jobs took longer than 30 s on a loaded machine.
	deadline := time.Now().Add(2 * time.Minute)
	for countWhere(t, e.admin, "status = 'SUCCEEDED'") != jobsN {
		if time.Now().After(deadline) {
			t.Fatalf("%d jobs SUCCEEDED after 2 minutes", countWhere(t, e.admin, "status = 'SUCCEEDED'"))
		}
		time.Sleep(20 * time.Millisecond) // polling interval, not synchronisation
	}
	for _, r := range runners {
		if err := r.stop(); err != nil {
			t.Fatal(err)
		}
	}
	// A backend's counters reach pg_stat_database by its exit at the
	// latest: close the workers' connections and wait for them to go.
	for _, p := range pools {
		p.Close()
	}
	e.waitFor("the workers' backends to exit", func() bool {
		return testdb.Scalar[int64](t, e.admin, `SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE 'rl-load-%'`) == 0
	})
	if d := deadlocks() - before; d != 0 {
		t.Errorf("%d deadlocks during the run", d)
	}
	if n := countWhere(t, e.admin, "attempt <> 1"); n != 0 {
		t.Errorf("%d jobs ran more than one attempt", n)
	}
	if n := testdb.Scalar[int64](t, e.admin, `SELECT count(*) FROM job_queue q WHERE (SELECT count(*) FROM job_events ev
		WHERE ev.organization_id = q.organization_id AND ev.job_id = q.id AND ev.event_type = 'SUCCEEDED') <> 1`); n != 0 {
		t.Errorf("%d jobs without exactly one SUCCEEDED event", n)
	}
	if got := finished.Load(); got != jobsN {
		t.Errorf("the workers reported %d attempts, want %d", got, jobsN)
	}
}
