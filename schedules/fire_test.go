package schedules_test

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/internal/testdb"
	"github.com/runledger-go/runledger/jobs"
	"github.com/runledger-go/runledger/schedules"
)

// TestFireMissedPolicies simulates a downtime (cursors hours or years in
// the past) and checks what each policy fires and where the cursor goes.
func TestFireMissedPolicies(t *testing.T) {
	t.Parallel()
	ctx, pool := setup(t)
	org := runledger.Organization(uuid.New())
	// Hourly, cursor five hours back: six due ticks.
	upsert(t, ctx, pool, schedules.UpsertRequest{Scope: org, Name: "all", Cron: "0 * * * *", JobType: "report",
		Missed: schedules.MissedAll, MissedMax: 3})
	upsert(t, ctx, pool, schedules.UpsertRequest{Scope: org, Name: "latest", Cron: "0 * * * *", JobType: "report"})
	// Yearly on January 1st, cursor three years back: the newest due
	// tick is months late, so skip fires nothing.
	upsert(t, ctx, pool, schedules.UpsertRequest{Scope: org, Name: "skip", Cron: "0 0 1 1 *", JobType: "report",
		Missed: schedules.MissedSkip})
	// Every second, cursor ten minutes back: the newest tick is on time.
	upsert(t, ctx, pool, schedules.UpsertRequest{Scope: org, Name: "skip-on-time", Cron: "* * * * * *", JobType: "report",
		Missed: schedules.MissedSkip})
	setCursor(t, pool, org, "all", `date_trunc('hour', now()) - interval '5 hours'`)
	setCursor(t, pool, org, "latest", `date_trunc('hour', now()) - interval '5 hours'`)
	setCursor(t, pool, org, "skip", `date_trunc('year', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' - interval '3 years'`)
	setCursor(t, pool, org, "skip-on-time", `date_trunc('second', now()) - interval '10 minutes'`)

	res := fireDue(t, ctx, pool, schedules.FireRequest{})
	hour := res.Now.Truncate(time.Hour)
	want := map[string][]time.Time{
		"all":          {hour.Add(-2 * time.Hour), hour.Add(-time.Hour), hour},
		"latest":       {hour},
		"skip-on-time": {res.Now.Truncate(time.Second)},
	}
	got := map[string][]time.Time{}
	for _, f := range res.Fired {
		got[f.Schedule] = append(got[f.Schedule], f.Tick)
	}
	for name, ticks := range want {
		if len(got[name]) != len(ticks) {
			t.Errorf("%s fired %v, want %v", name, got[name], ticks)
			continue
		}
		for i := range ticks {
			if !got[name][i].Equal(ticks[i]) {
				t.Errorf("%s fired %v, want %v", name, got[name], ticks)
			}
		}
	}
	if len(got["skip"]) != 0 {
		t.Errorf("skip fired a missed tick: %v", got["skip"])
	}
	if n := len(firedKeys(t, pool, org)); n != 5 {
		t.Errorf("%d jobs, want 5", n)
	}
	// Every cursor is past the database clock; a second round fires
	// nothing.
	for _, s := range []string{"all", "latest", "skip"} {
		sch, err := schedules.Get(ctx, pool, org, s)
		if err != nil || !sch.NextFireAt.After(res.Now) {
			t.Errorf("%s cursor %v (err %v) not after %s", s, sch.NextFireAt, err, res.Now)
		}
	}
	sch, _ := schedules.Get(ctx, pool, org, "all")
	if sch.LastFiredAt == nil || !sch.LastFiredAt.Equal(hour) {
		t.Errorf("last fired %v, want %s", sch.LastFiredAt, hour)
	}
	setCursor(t, pool, org, "skip-on-time", `now() + interval '1 hour'`)
	if again := fireDue(t, ctx, pool, schedules.FireRequest{}); len(again.Fired) != 0 {
		t.Errorf("second round fired %+v", again.Fired)
	}
}

// TestFireSkipsHeldSchedule: a firer passes a schedule another firer
// holds (SKIP LOCKED), and after the holder commits the tick exists once.
func TestFireSkipsHeldSchedule(t *testing.T) {
	t.Parallel()
	ctx, pool := setup(t)
	upsert(t, ctx, pool, schedules.UpsertRequest{Scope: runledger.Global(), Name: "held", Cron: "0 * * * *", JobType: "report"})
	setCursor(t, pool, runledger.Global(), "held", `date_trunc('hour', now())`)
	tx := testdb.Begin(t, ctx, pool)
	first, err := schedules.FireDueTx(ctx, tx, schedules.FireRequest{Limit: 10})
	if err != nil || len(first.Fired) != 1 {
		t.Fatalf("first firer: %+v %v", first, err)
	}
	second := fireDue(t, ctx, pool, schedules.FireRequest{})
	if len(second.Fired) != 0 {
		t.Errorf("second firer fired a held schedule: %+v", second.Fired)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if third := fireDue(t, ctx, pool, schedules.FireRequest{}); len(third.Fired) != 0 {
		t.Errorf("fired again after commit: %+v", third.Fired)
	}
	if n := testdb.Count(t, pool, "job_queue"); n != 1 {
		t.Errorf("%d jobs, want 1", n)
	}
}

// TestFireKilledMidFire: the firer's connection is terminated after it
// enqueued and before COMMIT; nothing is fired, the cursor is unchanged,
// and the next firer fires the tick once.
func TestFireKilledMidFire(t *testing.T) {
	t.Parallel()
	ctx, pool := setup(t)
	upsert(t, ctx, pool, schedules.UpsertRequest{Scope: runledger.Global(), Name: "k", Cron: "0 * * * *", JobType: "report"})
	setCursor(t, pool, runledger.Global(), "k", `date_trunc('hour', now())`)
	cursor := testdb.Scalar[time.Time](t, pool, `SELECT next_fire_at FROM job_schedules`)
	tx := testdb.Begin(t, ctx, pool)
	pid := testdb.Scalar[int32](t, tx, `SELECT pg_backend_pid()`)
	if res, err := schedules.FireDueTx(ctx, tx, schedules.FireRequest{Limit: 10}); err != nil || len(res.Fired) != 1 {
		t.Fatalf("fire: %+v %v", res, err)
	}
	if !testdb.Scalar[bool](t, pool, `SELECT pg_terminate_backend($1::int)`, pid) {
		t.Fatal("terminate the firer's backend")
	}
	if err := tx.Commit(ctx); err == nil {
		t.Fatal("commit after the backend was terminated succeeded")
	}
	// pg_terminate_backend only signals: the schedule stays locked until
	// the backend (on Citus, its shard's connection) has gone.
	testdb.WaitFor(t, "the killed firer's lock to go", func() bool {
		return !testdb.RowLocked(t, pool, "job_schedules", "name = $1", "k", "UPDATE")
	})
	if n := testdb.Count(t, pool, "job_queue"); n != 0 {
		t.Errorf("%d jobs after the killed fire", n)
	}
	if got := testdb.Scalar[time.Time](t, pool, `SELECT next_fire_at FROM job_schedules`); !got.Equal(cursor) {
		t.Errorf("cursor moved to %s by the killed fire", got)
	}
	if res := fireDue(t, ctx, pool, schedules.FireRequest{}); len(res.Fired) != 1 {
		t.Errorf("refire: %+v", res)
	}
	if n := testdb.Count(t, pool, "job_queue"); n != 1 {
		t.Errorf("%d jobs, want 1", n)
	}
}

// TestFireGoesByDatabaseClock: the transaction's clock (now()) decides
// what is due, not the firer's: a cursor just after the start of the
// firer's transaction is not due in it, although the process clock has
// passed it.
func TestFireGoesByDatabaseClock(t *testing.T) {
	t.Parallel()
	ctx, pool := setup(t)
	upsert(t, ctx, pool, schedules.UpsertRequest{Scope: runledger.Global(), Name: "c", Cron: "* * * * * *", JobType: "report"})
	tx := testdb.Begin(t, ctx, pool)
	txNow := testdb.Scalar[time.Time](t, tx, `SELECT now()`)
	testdb.Exec(t, pool, `UPDATE job_schedules SET next_fire_at = $1`, txNow.Add(time.Microsecond))
	if !time.Now().After(txNow.Add(time.Microsecond)) {
		t.Fatal("the process clock has not passed the cursor")
	}
	res, err := schedules.FireDueTx(ctx, tx, schedules.FireRequest{Limit: 10})
	if err != nil || len(res.Fired) != 0 || !res.Now.Equal(txNow) {
		t.Errorf("fire in a transaction at %s: %+v %v", txNow, res, err)
	}
	_ = tx.Rollback(ctx)
	testdb.Exec(t, pool, `UPDATE job_schedules SET next_fire_at = date_trunc('second', now())`)
	if res := fireDue(t, ctx, pool, schedules.FireRequest{}); len(res.Fired) != 1 {
		t.Errorf("due by the database clock: %+v", res)
	}
}

// TestFireBlockedDefinition: a schedule whose type is disabled or missing
// is reported, not fired, and keeps its cursor; once the type is enabled
// it fires by its missed policy.
func TestFireBlockedDefinition(t *testing.T) {
	t.Parallel()
	ctx, pool := setup(t)
	testdb.Define(t, ctx, pool, jobs.DefinitionInput{JobType: "off", Enabled: testdb.Ptr(false)})
	upsert(t, ctx, pool, schedules.UpsertRequest{Scope: runledger.Global(), Name: "off", Cron: "0 * * * *", JobType: "off"})
	upsert(t, ctx, pool, schedules.UpsertRequest{Scope: runledger.Global(), Name: "missing", Cron: "0 * * * *", JobType: "nobody"})
	setCursor(t, pool, runledger.Global(), "off", `date_trunc('hour', now()) - interval '2 hours'`)
	setCursor(t, pool, runledger.Global(), "missing", `date_trunc('hour', now())`)
	res := fireDue(t, ctx, pool, schedules.FireRequest{})
	if len(res.Fired) != 0 || len(res.Blocked) != 2 {
		t.Fatalf("fired %+v, blocked %+v", res.Fired, res.Blocked)
	}
	for _, b := range res.Blocked {
		if !errors.Is(b.Err, runledger.CodeDefinitionNotFoundOrDisabled) {
			t.Errorf("blocked %s: %v", b.Schedule, b.Err)
		}
	}
	// A worker of other types does not hear of them.
	if res := fireDue(t, ctx, pool, schedules.FireRequest{JobTypes: []string{"report"}}); len(res.Blocked) != 0 {
		t.Errorf("blocked for a worker of report: %+v", res.Blocked)
	}
	testdb.Define(t, ctx, pool, jobs.DefinitionInput{JobType: "off", Enabled: testdb.Ptr(true)})
	res = fireDue(t, ctx, pool, schedules.FireRequest{})
	if len(res.Fired) != 1 || res.Fired[0].Schedule != "off" || !res.Fired[0].Tick.Equal(res.Now.Truncate(time.Hour)) {
		t.Errorf("after enabling: %+v", res.Fired)
	}
}

// TestFireJitterAndPriority: the fired job runs at its tick plus the
// schedule's jitter and takes its priority.
func TestFireJitterAndPriority(t *testing.T) {
	t.Parallel()
	ctx, pool := setup(t)
	upsert(t, ctx, pool, schedules.UpsertRequest{Scope: runledger.Global(), Name: "j", Cron: "0 * * * *", JobType: "report",
		Jitter: 30 * time.Second, Priority: testdb.Ptr(int32(7)), Payload: json.RawMessage(`{"k":"v"}`)})
	setCursor(t, pool, runledger.Global(), "j", `date_trunc('hour', now())`)
	res := fireDue(t, ctx, pool, schedules.FireRequest{})
	if len(res.Fired) != 1 {
		t.Fatalf("fired %+v", res.Fired)
	}
	var runAt time.Time
	var prio int32
	err := pool.QueryRow(ctx, `SELECT next_run_at, priority FROM job_queue WHERE id = $1`, res.Fired[0].JobID).Scan(&runAt, &prio)
	if err != nil {
		t.Fatal(err)
	}
	tick := res.Fired[0].Tick
	if runAt.Before(tick) || runAt.After(tick.Add(30*time.Second)) || prio != 7 {
		t.Errorf("run at %s (tick %s), priority %d", runAt, tick, prio)
	}
}

// TestFireTickKeyHeldByAnotherRequest: when a job enqueued with another
// request already holds a tick's key (a schedule deleted and made again
// with another payload), the tick is reported and passed, never a second
// job; the cursor moves on.
func TestFireTickKeyHeldByAnotherRequest(t *testing.T) {
	t.Parallel()
	ctx, pool := setup(t)
	upsert(t, ctx, pool, schedules.UpsertRequest{Scope: runledger.Global(), Name: "h", Cron: "0 * * * *", JobType: "report"})
	setCursor(t, pool, runledger.Global(), "h", `date_trunc('hour', now())`)
	tick := testdb.Scalar[time.Time](t, pool, `SELECT next_fire_at FROM job_schedules`)
	held := testdb.Enqueue(t, ctx, pool, jobs.EnqueueRequest{JobType: "report", Payload: json.RawMessage(`{"by":"hand"}`),
		IdempotencyKey: schedules.IdempotencyKey("h", tick)})
	res := fireDue(t, ctx, pool, schedules.FireRequest{})
	if len(res.Fired) != 0 || len(res.Blocked) != 1 || !errors.Is(res.Blocked[0].Err, runledger.CodeIdempotencyConflict) {
		t.Fatalf("fired %+v, blocked %+v", res.Fired, res.Blocked)
	}
	if n := testdb.Count(t, pool, "job_queue"); n != 1 {
		t.Errorf("%d jobs, want only %s", n, held.ID)
	}
	if sch, err := schedules.Get(ctx, pool, runledger.Global(), "h"); err != nil || !sch.NextFireAt.After(res.Now) || sch.LastFiredAt != nil {
		t.Errorf("schedule after the passed tick: %+v %v", sch, err)
	}
}

// TestAnyDue: the poller's one-statement question is true only while an
// active schedule of one of the asked types is due by the database clock.
func TestAnyDue(t *testing.T) {
	t.Parallel()
	ctx, pool := setup(t)
	anyDue := func(types ...string) bool {
		t.Helper()
		due, err := schedules.AnyDue(ctx, pool, types)
		if err != nil {
			t.Fatal(err)
		}
		return due
	}
	if anyDue("report") {
		t.Fatal("due without any schedule")
	}
	upsert(t, ctx, pool, schedules.UpsertRequest{Scope: runledger.Global(), Name: "hourly", Cron: "0 * * * *", JobType: "report"})
	if anyDue("report") {
		t.Fatal("due before its next tick")
	}
	setCursor(t, pool, runledger.Global(), "hourly", `now() - interval '1 second'`)
	if !anyDue("report") || anyDue("other") || anyDue() {
		t.Fatalf("due schedule of report: report %v, other %v, none %v; want true, false, false", anyDue("report"), anyDue("other"), anyDue())
	}
	if _, err := schedules.Pause(ctx, pool, runledger.Global(), "hourly"); err != nil {
		t.Fatal(err)
	}
	if anyDue("report") {
		t.Fatal("a paused schedule is due")
	}
}
