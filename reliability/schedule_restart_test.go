package reliability_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/internal/testdb"
	"github.com/runledger-go/runledger/schedules"
	"github.com/runledger-go/runledger/worker"
)

const (
	typeTick     = "rl.tick"
	scheduleTick = "every-second"
	// scheduleOutage is how long, by the database clock, the ledger's
	// database refuses the workers after the restart: several ticks of
	// the schedule fall in it.
	scheduleOutage = 3 * time.Second
)

// firedCounter is a slog.Handler that counts the worker's "fired
// schedules" records, so the test can say which worker fired.
type firedCounter struct {
	mu sync.Mutex
	n  int
}

func (h *firedCounter) Enabled(context.Context, slog.Level) bool { return true }
func (h *firedCounter) Handle(_ context.Context, r slog.Record) error {
	if r.Message == "runledger worker: fired schedules" {
		h.mu.Lock()
		h.n++
		h.mu.Unlock()
	}
	return nil
}
func (h *firedCounter) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *firedCounter) WithGroup(string) slog.Handler      { return h }
func (h *firedCounter) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n
}

// TestScheduleAcrossServerRestart fires a schedule due every second
// (six-field cron, missed policy latest) by the schedulers of two
// workers, each on a pool of its own, on a dedicated durable server. Once
// three ticks have fired, the ledger's database is closed to new
// connections (ALTER DATABASE ... ALLOW_CONNECTIONS false, from another
// database) and the server is stopped in immediate mode (crash recovery)
// and started again; the database is opened again only once the database
// clock has moved three seconds past the new server's start, so that the workers,
// which reconnect by themselves, meet a downtime of several ticks. Once
// three ticks after it have fired, the workers are stopped and the ledger
// must show: no tick with two jobs, every job keyed schedule:NAME:TICK
// with its tick in its payload; every job's tick the newest tick at or
// before the fire's database clock (its created_at), and no two jobs from
// one fire (latest fires one tick per round); of the ticks from the last
// fired before the restart to the reopening, at most one fired, the
// others dropped; and the schedule's cursor after the last tick fired.
func TestScheduleAcrossServerRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("server restart test: skipped under -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	srv, otherURL := startDurableServer(t, ctx)
	// The ledger of this test is a database of its own, so that it can be
	// closed while the server's postgres database (which the restart
	// waits for) stays open.
	other := openPool(t, otherURL, "rl-outage", 1, nil)
	testdb.Exec(t, other, `CREATE DATABASE rl_ledger`)
	url := srv.URL("rl_ledger")
	migrate(t, ctx, url)
	admin := openPool(t, url, "rl-admin", 2, nil)
	defineTypes(t, admin, map[string]int32{typeTick: 3})
	if _, err := schedules.Upsert(ctx, admin, schedules.UpsertRequest{Scope: runledger.Global(), Name: scheduleTick,
		Cron: "* * * * * *", JobType: typeTick, Missed: schedules.MissedLatest}); err != nil {
		t.Fatal(err)
	}

	noop := func(ctx context.Context, _ worker.Job[json.RawMessage]) (any, error) { return nil, nil }
	var fired [2]*firedCounter
	var runners [2]*runner
	for i, id := range []string{"firer-a", "firer-b"} {
		fired[i] = &firedCounter{}
		pool := openPool(t, url, "rl-"+id, 4, nil)
		runners[i] = startWorker(t, pool, worker.Config{WorkerID: id, Concurrency: 4, Lease: 5 * time.Second,
			PollInterval: 100 * time.Millisecond, RecoveryInterval: 500 * time.Millisecond, Logger: slog.New(fired[i])},
			func(w *worker.Worker) error { return worker.Register(w, typeTick, noop) })
	}
	ticksAfter := func(q testdb.Querier, after time.Time) int64 {
		return testdb.Scalar[int64](t, q, `SELECT count(*) FROM job_queue
			WHERE job_type = $1 AND (payload->'schedule'->>'tick')::timestamptz > $2`, typeTick, after)
	}
	waitLedger(t, 30*time.Second, "three ticks fired", func() bool { return ticksAfter(admin, time.Time{}) >= 3 })

	testdb.Exec(t, other, `ALTER DATABASE rl_ledger WITH ALLOW_CONNECTIONS false`)
	if err := srv.Restart(ctx, "immediate"); err != nil {
		t.Fatalf("restart immediate: %v", err)
	}
	admin.Close()
	other.Close()
	other = openPool(t, otherURL, "rl-outage-2", 1, nil)
	// Jobs created before the new server started were fired before the
	// restart; the outage is counted from that start.
	started := testdb.Scalar[time.Time](t, other, `SELECT pg_postmaster_start_time()`)
	waitLedger(t, 30*time.Second, "the database clock to pass the outage", func() bool {
		return testdb.Scalar[time.Time](t, other, `SELECT now()`).After(started.Add(scheduleOutage))
	})
	up := testdb.Scalar[time.Time](t, other, `SELECT now()`)
	testdb.Exec(t, other, `ALTER DATABASE rl_ledger WITH ALLOW_CONNECTIONS true`)
	admin = openPool(t, url, "rl-admin-2", 2, nil)
	waitLedger(t, 60*time.Second, "three ticks fired after the outage", func() bool { return ticksAfter(admin, up) >= 3 })
	for i, r := range runners {
		if err := r.stop(); err != nil {
			t.Fatalf("worker %d: Run returned %v", i, err)
		}
	}

	for what, sql := range map[string]string{
		"ticks with more than one job": `SELECT count(*) FROM (SELECT 1 FROM job_queue WHERE job_type = $1
			GROUP BY payload->'schedule'->>'tick' HAVING count(*) > 1) d`,
		"jobs not keyed schedule:NAME:TICK by their payload's tick": `SELECT count(*) FROM job_queue WHERE job_type = $1
			AND (idempotency_key IS DISTINCT FROM 'schedule:` + scheduleTick + `:' || (payload->'schedule'->>'tick')
			     OR payload->'schedule'->>'name' IS DISTINCT FROM '` + scheduleTick + `')`,
		"jobs whose tick is not the newest at or before their fire (latest)": `SELECT count(*) FROM job_queue WHERE job_type = $1
			AND (payload->'schedule'->>'tick')::timestamptz <> date_trunc('second', created_at)`,
		"fires that made more than one job": `SELECT count(*) FROM (SELECT 1 FROM job_queue WHERE job_type = $1
			GROUP BY created_at HAVING count(*) > 1) d`,
	} {
		if n := testdb.Scalar[int64](t, admin, sql, typeTick); n != 0 {
			t.Errorf("%d %s", n, what)
		}
	}
	lastBefore := testdb.Scalar[time.Time](t, admin, `SELECT max((payload->'schedule'->>'tick')::timestamptz) FROM job_queue
		WHERE job_type = $1 AND created_at < $2`, typeTick, started)
	firstAfter := testdb.Scalar[time.Time](t, admin, `SELECT min((payload->'schedule'->>'tick')::timestamptz) FROM job_queue
		WHERE job_type = $1 AND created_at > $2`, typeTick, started)
	if n := ticksAfter(admin, lastBefore) - ticksAfter(admin, up); n > 1 {
		t.Errorf("%d ticks from %s (the last fired before the restart) to %s (the reopening) fired; latest fires at most one", n,
			lastBefore.Format(time.RFC3339), up.Format(time.RFC3339))
	}
	if missed := firstAfter.Sub(lastBefore)/time.Second - 1; missed < 2 {
		t.Errorf("only %d ticks missed between %s and %s: the outage did not span the ticks it should", missed,
			lastBefore.Format(time.RFC3339), firstAfter.Format(time.RFC3339))
	}
	if n := testdb.Scalar[int64](t, admin, `SELECT count(*) FROM job_schedules s WHERE s.name = $1 AND s.next_fire_at <=
		(SELECT max((payload->'schedule'->>'tick')::timestamptz) FROM job_queue WHERE job_type = $2)`, scheduleTick, typeTick); n != 0 {
		t.Error("the schedule's cursor is at or before the last tick fired")
	}
	t.Logf("ticks fired: %d; last before the restart %s, first after the outage %s (reopened at %s); rounds that fired, by worker: %d, %d",
		ticksAfter(admin, time.Time{}), lastBefore.Format(time.RFC3339), firstAfter.Format(time.RFC3339),
		up.Format(time.RFC3339Nano), fired[0].count(), fired[1].count())
}
