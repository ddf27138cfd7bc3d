package reliability_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/runledger-go/runledger/internal/testdb"
	"github.com/runledger-go/runledger/jobs"
	"github.com/runledger-go/runledger/worker"
)

const (
	typePaused  = "rl.paused"
	typeRunning = "rl.running"
)

// waitLedger polls the ledger (through a pool opened for the purpose, the
// server having been restarted) until cond holds, for at most limit: it
// waits for an outcome, it does not order anything.
func waitLedger(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", limit, what)
		}
		time.Sleep(20 * time.Millisecond) // polling the ledger, not synchronisation
	}
}

// TestPausedTypeStaysPausedAcrossServerRestarts pauses a job type on a
// dedicated durable server, enqueues six jobs of it (priorities and due
// times chosen so that their claim order differs from their enqueue
// order) and two of another type, and stops the server in fast mode and
// starts it again. A worker (one handler, so that it leases one job at a
// time and the LEASED events follow the claim order) started afterwards
// runs the other type's jobs and leaves the paused type's PENDING at
// attempt 0. The server is then stopped in immediate mode (crash recovery
// from the WAL) under the running worker; a third job of the other type,
// enqueued after it came back, shows the worker claiming again, and the
// paused type's jobs are still PENDING. Resumed, they run, their LEASED
// events in claim order: priority (highest first), then due time.
func TestPausedTypeStaysPausedAcrossServerRestarts(t *testing.T) {
	if testing.Short() {
		t.Skip("server restart test: skipped under -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	srv, url := startDurableServer(t, ctx)
	admin := openPool(t, url, "rl-admin", 2, nil)
	defineTypes(t, admin, map[string]int32{typePaused: 3, typeRunning: 3})
	if _, err := jobs.PauseType(ctx, admin, typePaused); err != nil {
		t.Fatal(err)
	}

	now := testdb.Scalar[time.Time](t, admin, `SELECT now()`)
	type spec struct {
		prio int32
		due  time.Duration // before the database clock
	}
	// Enqueue order; the claim order is by priority descending, then due
	// time: 9/-5s, 5/-20s, 5/-1s, 0/-30s, 0/-20s, 0/-10s.
	specs := []spec{{0, 10 * time.Second}, {5, time.Second}, {0, 30 * time.Second}, {5, 20 * time.Second}, {9, 5 * time.Second}, {0, 20 * time.Second}}
	wantOrder := []int{4, 3, 1, 2, 5, 0}
	paused := make([]uuid.UUID, len(specs))
	name := map[uuid.UUID]string{}
	for i, s := range specs {
		runAt := now.Add(-s.due)
		prio := s.prio
		j := testdb.Enqueue(t, ctx, admin, jobs.EnqueueRequest{JobType: typePaused, Priority: &prio, RunAt: &runAt,
			Payload: json.RawMessage(fmt.Sprintf(`{"n": %d}`, i))})
		paused[i] = j.ID
		name[j.ID] = fmt.Sprintf("#%d(p%d,-%s)", i, s.prio, s.due)
	}
	running := enqueueN(t, admin, typeRunning, 2)

	if err := srv.Restart(ctx, "fast"); err != nil {
		t.Fatalf("restart fast: %v", err)
	}
	admin.Close()
	admin = openPool(t, url, "rl-admin-2", 2, nil)
	if !testdb.Scalar[bool](t, admin, `SELECT is_paused FROM job_definitions WHERE job_type = $1`, typePaused) {
		t.Fatal("the pause did not survive a fast restart")
	}

	wpool := openPool(t, url, "rl-worker", 4, nil)
	noop := func(ctx context.Context, _ worker.Job[json.RawMessage]) (any, error) { return nil, nil }
	w := startWorker(t, wpool, worker.Config{WorkerID: "pause-worker", Concurrency: 1, Lease: 5 * time.Second,
		PollInterval: 50 * time.Millisecond, RecoveryInterval: 500 * time.Millisecond, Logger: slog.New(newLogCounter())},
		func(w *worker.Worker) error {
			if err := worker.Register(w, typePaused, noop); err != nil {
				return err
			}
			return worker.Register(w, typeRunning, noop)
		})
	checkPaused := func(when string) {
		t.Helper()
		if n := countWhere(t, admin, `job_type = $1 AND status = 'PENDING' AND attempt = 0`, typePaused); n != int64(len(paused)) {
			t.Fatalf("%s: %d of the paused type's %d jobs PENDING at attempt 0; by status: %v", when, n, len(paused),
				testdb.Column[string](t, admin, `SELECT job_type || ' ' || status || ' ' || count(*) FROM job_queue GROUP BY 1`))
		}
		if n := testdb.Scalar[int64](t, admin, `SELECT count(*) FROM job_events e JOIN job_queue q ON q.id = e.job_id
			WHERE q.job_type = $1 AND e.event_type <> 'ENQUEUED'`, typePaused); n != 0 {
			t.Fatalf("%s: %d events besides ENQUEUED on the paused type's jobs", when, n)
		}
	}
	succeeded := func(ids []uuid.UUID) func() bool {
		return func() bool {
			return countWhere(t, admin, `id = ANY($1) AND status = 'SUCCEEDED'`, ids) == int64(len(ids))
		}
	}
	waitLedger(t, 30*time.Second, "the other type's jobs to succeed", succeeded([]uuid.UUID{running[0].ID, running[1].ID}))
	checkPaused("after a fast restart, the other type's jobs done")

	if err := srv.Restart(ctx, "immediate"); err != nil {
		t.Fatalf("restart immediate: %v", err)
	}
	admin.Close()
	admin = openPool(t, url, "rl-admin-3", 2, nil)
	marker := enqueueN(t, admin, typeRunning, 1)[0]
	waitLedger(t, 60*time.Second, "the worker to run a job enqueued after the immediate restart", succeeded([]uuid.UUID{marker.ID}))
	checkPaused("after an immediate restart under the worker, a later job of the other type done")

	if _, err := jobs.ResumeType(ctx, admin, typePaused); err != nil {
		t.Fatal(err)
	}
	waitLedger(t, 30*time.Second, "the resumed type's jobs to succeed", succeeded(paused))
	if err := w.stop(); err != nil {
		t.Fatalf("Run returned %v", err)
	}

	leased := testdb.Column[uuid.UUID](t, admin, `SELECT e.job_id FROM job_events e JOIN job_queue q ON q.id = e.job_id
		WHERE q.job_type = $1 AND e.event_type = 'LEASED' ORDER BY e.id`, typePaused)
	var got, want []string
	for _, id := range leased {
		got = append(got, name[id])
	}
	for _, i := range wantOrder {
		want = append(want, name[paused[i]])
	}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("leased in the order %v, want the claim order %v", got, want)
	}
	for _, id := range paused {
		if h := history(t, admin, id); h != "ENQUEUED LEASED@1 SUCCEEDED@1" {
			t.Errorf("job %s: %s", name[id], h)
		}
	}
}
