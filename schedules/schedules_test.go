package schedules_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/internal/testdb"
	"github.com/runledger-go/runledger/jobs"
	"github.com/runledger-go/runledger/schedules"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// setup returns a fresh migrated database with job type "report"
// defined and enabled.
func setup(t *testing.T) (context.Context, *pgxpool.Pool) {
	t.Helper()
	pool := testdb.New(t)
	ctx := testdb.Context(t)
	testdb.Define(t, ctx, pool, jobs.DefinitionInput{JobType: "report"})
	return ctx, pool
}

func upsert(t *testing.T, ctx context.Context, pool *pgxpool.Pool, req schedules.UpsertRequest) schedules.UpsertResult {
	t.Helper()
	res, err := schedules.Upsert(ctx, pool, req)
	if err != nil {
		t.Fatalf("upsert %q: %v", req.Name, err)
	}
	return res
}

// setCursor moves a schedule's cursor with test SQL (a simulated
// downtime); at is an SQL expression over now().
func setCursor(t *testing.T, pool *pgxpool.Pool, scope runledger.Scope, name, at string) {
	t.Helper()
	testdb.Exec(t, pool, `UPDATE job_schedules SET next_fire_at = `+at+` WHERE organization_id = $1 AND name = $2`,
		testdb.Tenant(scope), name)
}

func fireDue(t *testing.T, ctx context.Context, pool *pgxpool.Pool, req schedules.FireRequest) schedules.FireResult {
	t.Helper()
	if req.Limit == 0 {
		req.Limit = 100
	}
	res, err := schedules.FireDue(ctx, pool, req)
	if err != nil {
		t.Fatalf("fire due: %v", err)
	}
	return res
}

// firedKeys lists the idempotency keys of a tenant's jobs, oldest tick
// first.
func firedKeys(t *testing.T, pool *pgxpool.Pool, scope runledger.Scope) []string {
	t.Helper()
	return testdb.Column[string](t, pool, `SELECT idempotency_key FROM job_queue
		WHERE organization_id = $1 AND idempotency_key LIKE 'schedule:%' ORDER BY idempotency_key`, testdb.Tenant(scope))
}

func TestUpsertLifecycle(t *testing.T) {
	t.Parallel()
	ctx, pool := setup(t)
	org := runledger.Organization(uuid.New())
	req := schedules.UpsertRequest{Scope: org, Name: "nightly", Cron: "0 3 * * *", TZ: "Europe/Berlin",
		JobType: "report", Payload: json.RawMessage(`{"a": 1}`)}
	first := upsert(t, ctx, pool, req)
	if first.Disposition != schedules.Inserted || first.Schedule.Missed != schedules.MissedLatest ||
		first.Schedule.MissedMax != schedules.DefaultMissedMax || !first.Schedule.Active || first.Schedule.LastFiredAt != nil {
		t.Fatalf("insert: %+v", first)
	}
	now := testdb.Scalar[time.Time](t, pool, `SELECT now()`)
	if !first.Schedule.NextFireAt.After(now.Add(-time.Second)) || first.Schedule.NextFireAt.After(now.Add(25*time.Hour)) {
		t.Errorf("cursor %s is not the next 03:00 Berlin after %s", first.Schedule.NextFireAt, now)
	}
	// The same request (payload spelled differently) writes nothing.
	req.Payload = json.RawMessage(`{"a":1}`)
	if again := upsert(t, ctx, pool, req); again.Disposition != schedules.Unchanged {
		t.Errorf("same request: %s", again.Disposition)
	}
	// A payload change keeps the cursor; a cron change moves it.
	setCursor(t, pool, org, "nightly", `now() - interval '1 hour'`)
	kept := testdb.Scalar[time.Time](t, pool, `SELECT next_fire_at FROM job_schedules WHERE name = 'nightly'`)
	req.Payload = json.RawMessage(`{"a":2}`)
	up := upsert(t, ctx, pool, req)
	if up.Disposition != schedules.Updated || !up.Schedule.NextFireAt.Equal(kept) {
		t.Errorf("payload change: %s, cursor %s, want kept %s", up.Disposition, up.Schedule.NextFireAt, kept)
	}
	req.Cron = "0 4 * * *"
	up = upsert(t, ctx, pool, req)
	if up.Disposition != schedules.Updated || !up.Schedule.NextFireAt.After(kept) {
		t.Errorf("cron change: %s, cursor %s not moved past %s", up.Disposition, up.Schedule.NextFireAt, kept)
	}

	// Another tenant sees nothing of it.
	other := runledger.Organization(uuid.New())
	if _, err := schedules.Get(ctx, pool, other, "nightly"); !errors.Is(err, schedules.CodeNotFound) {
		t.Errorf("get from another tenant: %v", err)
	}
	if l, err := schedules.List(ctx, pool, other, 100); err != nil || len(l) != 0 {
		t.Errorf("list of another tenant: %v %v", l, err)
	}
	if l, err := schedules.List(ctx, pool, org, 100); err != nil || len(l) != 1 || l[0].Name != "nightly" {
		t.Errorf("list: %v %v", l, err)
	}

	// Pause keeps the cursor; resume moves it past the database clock.
	setCursor(t, pool, org, "nightly", `now() - interval '1 hour'`)
	p, err := schedules.Pause(ctx, pool, org, "nightly")
	if err != nil || p.Active {
		t.Fatalf("pause: %+v %v", p, err)
	}
	if res := fireDue(t, ctx, pool, schedules.FireRequest{}); len(res.Fired) != 0 {
		t.Errorf("a paused schedule fired: %+v", res.Fired)
	}
	r, err := schedules.Resume(ctx, pool, org, "nightly")
	now = testdb.Scalar[time.Time](t, pool, `SELECT now()`)
	if err != nil || !r.Active || !r.NextFireAt.After(now.Add(-time.Second)) {
		t.Fatalf("resume: %+v %v (now %s)", r, err, now)
	}
	if _, err := schedules.Pause(ctx, pool, other, "nightly"); !errors.Is(err, schedules.CodeNotFound) {
		t.Errorf("pause from another tenant: %v", err)
	}
	d, err := schedules.Delete(ctx, pool, org, "nightly")
	if err != nil || d.Name != "nightly" {
		t.Fatalf("delete: %+v %v", d, err)
	}
	if _, err := schedules.Delete(ctx, pool, org, "nightly"); !errors.Is(err, schedules.CodeNotFound) {
		t.Errorf("second delete: %v", err)
	}
}

func TestUpsertRefusesBadInput(t *testing.T) {
	t.Parallel()
	ctx, pool := setup(t)
	base := schedules.UpsertRequest{Scope: runledger.Global(), Name: "s", Cron: "* * * * *", JobType: "report"}
	cases := []struct {
		mod  func(*schedules.UpsertRequest)
		code runledger.Code
	}{
		{func(r *schedules.UpsertRequest) { r.Cron = "nope" }, schedules.CodeCronInvalid},
		{func(r *schedules.UpsertRequest) { r.TZ = "Nowhere/Town" }, schedules.CodeTimezoneInvalid},
		{func(r *schedules.UpsertRequest) { r.Name = " " }, schedules.CodeNameInvalid},
		{func(r *schedules.UpsertRequest) { r.Payload = json.RawMessage(`[1]`) }, schedules.CodePayloadInvalid},
		{func(r *schedules.UpsertRequest) { r.Payload = json.RawMessage(`{"schedule":1}`) }, schedules.CodePayloadInvalid},
		{func(r *schedules.UpsertRequest) { r.Jitter = 1500 * time.Millisecond }, schedules.CodeJitterInvalid},
		{func(r *schedules.UpsertRequest) { r.Missed = "some" }, schedules.CodeMissedInvalid},
		{func(r *schedules.UpsertRequest) { r.Scope = runledger.Organization(uuid.Nil) }, runledger.CodeOrganizationInvalid},
	}
	for i, c := range cases {
		req := base
		c.mod(&req)
		_, err := schedules.Upsert(ctx, pool, req)
		testdb.WantCode(t, err, c.code)
		_ = i
	}
	if n := testdb.Count(t, pool, "job_schedules"); n != 0 {
		t.Errorf("%d schedules written by refused requests", n)
	}
}

// TestFireTickOnceWithConcurrentFirers races firers on real connections:
// the due tick makes exactly one job, and exactly one firer reports it.
func TestFireTickOnceWithConcurrentFirers(t *testing.T) {
	t.Parallel()
	ctx, pool := setup(t)
	org := runledger.Organization(uuid.New())
	upsert(t, ctx, pool, schedules.UpsertRequest{Scope: org, Name: "tick", Cron: "0 0 1 * *", JobType: "report",
		Payload: json.RawMessage(`{"x":true}`)})
	upsert(t, ctx, pool, schedules.UpsertRequest{Scope: runledger.Global(), Name: "tick", Cron: "30 0 1 * *", JobType: "report"})
	// Monthly ticks, so that the firers, whose transactions start at
	// different instants, all see the same newest tick.
	setCursor(t, pool, org, "tick", `date_trunc('month', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'`)
	setCursor(t, pool, runledger.Global(), "tick", `date_trunc('month', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' + interval '30 minutes'`)

	const firers = 8
	var wg sync.WaitGroup
	start := make(chan struct{})
	results := make([]schedules.FireResult, firers)
	errs := make([]error, firers)
	for i := range firers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			results[i], errs[i] = schedules.FireDue(ctx, pool, schedules.FireRequest{Limit: 10})
		}()
	}
	close(start)
	wg.Wait()
	fired := map[string]int{}
	for i := range firers {
		if errs[i] != nil {
			t.Fatalf("firer %d: %v", i, errs[i])
		}
		for _, f := range results[i].Fired {
			fired[f.Scope.String()+"/"+f.Schedule]++
			if f.Disposition != runledger.DispositionInserted {
				t.Errorf("fire %+v not inserted", f)
			}
		}
	}
	if len(fired) != 2 || fired[org.String()+"/tick"] != 1 || fired[runledger.Global().String()+"/tick"] != 1 {
		t.Errorf("fires per schedule: %v, want each once", fired)
	}
	if n := testdb.Count(t, pool, "job_queue"); n != 2 {
		t.Errorf("%d jobs, want 2", n)
	}
	// The job names its schedule and tick, in its key and payload.
	var key string
	var payload map[string]any
	err := pool.QueryRow(ctx, `SELECT idempotency_key, payload FROM job_queue WHERE organization_id = $1`,
		testdb.Tenant(org)).Scan(&key, &payload)
	if err != nil {
		t.Fatal(err)
	}
	mark, _ := payload["schedule"].(map[string]any)
	if payload["x"] != true || mark["name"] != "tick" || key != "schedule:tick:"+mark["tick"].(string) {
		t.Errorf("job key %q payload %v", key, payload)
	}
}

// TestUpsertTxRefusesOtherIsolation: UpsertTx runs only in a read-write
// READ COMMITTED transaction, and writes nothing otherwise.
func TestUpsertTxRefusesOtherIsolation(t *testing.T) {
	t.Parallel()
	ctx, pool := setup(t)
	req := schedules.UpsertRequest{Scope: runledger.Global(), Name: "rr", Cron: "* * * * *", JobType: "report"}
	tx, err := pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	if err != nil {
		t.Fatal(err)
	}
	_, err = schedules.UpsertTx(ctx, tx, req)
	testdb.WantCode(t, err, schedules.CodeUnsupportedIsolation)
	_ = tx.Rollback(ctx)
	tx = testdb.Begin(t, ctx, pool)
	if res, err := schedules.UpsertTx(ctx, tx, req); err != nil || res.Disposition != schedules.Inserted {
		t.Fatalf("upsert in READ COMMITTED: %+v %v", res, err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if n := testdb.Count(t, pool, "job_schedules"); n != 1 {
		t.Errorf("%d schedules", n)
	}
}

// TestUpsertRacesAnInsertOfTheSameName: an upsert whose insert meets an
// uncommitted insert of the same name waits for it, then finds the row
// and compares: the same request is unchanged, never a second row or an
// error.
func TestUpsertRacesAnInsertOfTheSameName(t *testing.T) {
	t.Parallel()
	ctx, pool := setup(t)
	req := schedules.UpsertRequest{Scope: runledger.Organization(uuid.New()), Name: "race", Cron: "0 * * * *", JobType: "report"}
	tx := testdb.Begin(t, ctx, pool)
	if res, err := schedules.UpsertTx(ctx, tx, req); err != nil || res.Disposition != schedules.Inserted {
		t.Fatalf("first: %+v %v", res, err)
	}
	type out struct {
		res schedules.UpsertResult
		err error
	}
	done := make(chan out, 1)
	go func() {
		res, err := schedules.Upsert(ctx, pool, req)
		done <- out{res, err}
	}()
	testdb.WaitBlocked(t, pool, 0)
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	got := <-done
	if got.err != nil || got.res.Disposition != schedules.Unchanged {
		t.Fatalf("second: %+v %v", got.res, got.err)
	}
	if n := testdb.Count(t, pool, "job_schedules"); n != 1 {
		t.Errorf("%d schedules", n)
	}
}
