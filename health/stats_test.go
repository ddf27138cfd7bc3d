package health_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/health"
	"github.com/runledger-go/runledger/internal/testdb"
)

// The counts are exact against the rows they summarize, per scope and per
// type, and the whole-ledger view sums the tenants.
func TestStatsCountsPerScope(t *testing.T) {
	t.Parallel()
	ctx := testdb.Context(t)
	pool := testdb.New(t)
	global := uuid.Nil
	for i, org := range []uuid.UUID{orgA, orgB, global} {
		for n := 0; n <= i; n++ {
			for _, typ := range []string{"mail", "sync"} {
				insert(t, pool, job{org: org, jobType: typ, status: "PENDING", due: -time.Duration(n+1) * time.Minute})
				insert(t, pool, job{org: org, jobType: typ, status: "PENDING", due: time.Hour})
				insert(t, pool, job{org: org, jobType: typ, status: "LEASED", lease: time.Minute})
				insert(t, pool, job{org: org, jobType: typ, status: "LEASED", lease: -time.Second})
				insert(t, pool, job{org: org, jobType: typ, status: "SUCCEEDED", finished: 10 * time.Minute, ran: time.Duration(n+1) * time.Second})
				insert(t, pool, job{org: org, jobType: typ, status: "SUCCEEDED", finished: 2 * time.Hour, ran: time.Second})
				insert(t, pool, job{org: org, jobType: typ, status: "DEAD_LETTERED", finished: time.Minute, ran: time.Second})
				insert(t, pool, job{org: org, jobType: typ, status: "CANCELED", finished: time.Minute})
			}
		}
	}
	// The expected figures, counted from the rows by plain SQL.
	type figures struct{ due, scheduled, leased, expired, succeeded, dead, canceled int64 }
	want := func(org *uuid.UUID, jobType string) figures {
		var f figures
		if err := pool.QueryRow(ctx, `
			SELECT count(*) FILTER (WHERE status = 'PENDING' AND next_run_at <= now()),
			       count(*) FILTER (WHERE status = 'PENDING' AND next_run_at > now()),
			       count(*) FILTER (WHERE status = 'LEASED'),
			       count(*) FILTER (WHERE status = 'LEASED' AND lease_expires_at <= now()),
			       count(*) FILTER (WHERE status = 'SUCCEEDED' AND finished_at >= now() - interval '1 hour'),
			       count(*) FILTER (WHERE status = 'DEAD_LETTERED' AND finished_at >= now() - interval '1 hour'),
			       count(*) FILTER (WHERE status = 'CANCELED' AND finished_at >= now() - interval '1 hour')
			FROM job_queue WHERE ($1::uuid IS NULL OR organization_id = $1) AND job_type = $2`, org, jobType).
			Scan(&f.due, &f.scheduled, &f.leased, &f.expired, &f.succeeded, &f.dead, &f.canceled); err != nil {
			t.Fatal(err)
		}
		return f
	}
	scopes := []*runledger.Scope{nil, testdb.Ptr(runledger.Organization(orgA)), testdb.Ptr(runledger.Organization(orgB)), testdb.Ptr(runledger.Global())}
	for _, scope := range scopes {
		st, err := health.GetStats(ctx, pool, health.StatsRequest{Scope: scope})
		if err != nil {
			t.Fatal(err)
		}
		var org *uuid.UUID
		if scope != nil {
			org = testdb.Ptr(testdb.Tenant(*scope))
		}
		if len(st.Types) != 2 || st.Types[0].JobType != "mail" || st.Types[1].JobType != "sync" {
			t.Fatalf("scope %v: types %+v", scope, st.Types)
		}
		var total health.TypeStats
		for _, ts := range st.Types {
			w := want(org, ts.JobType)
			got := figures{ts.PendingDue, ts.PendingScheduled, ts.Leased, ts.ExpiredLeases, ts.Succeeded, ts.DeadLettered, ts.Canceled}
			if got != w {
				t.Errorf("scope %v type %s: got %+v, want %+v", scope, ts.JobType, got, w)
			}
			if ts.OldestDueAge == nil || *ts.OldestDueAge < time.Minute {
				t.Errorf("scope %v type %s: oldest due age %v", scope, ts.JobType, ts.OldestDueAge)
			}
			if ts.RunTimeP50 == nil || ts.RunTimeP95 == nil || *ts.RunTimeP50 < time.Second || *ts.RunTimeP95 < *ts.RunTimeP50 {
				t.Errorf("scope %v type %s: run times %v %v", scope, ts.JobType, ts.RunTimeP50, ts.RunTimeP95)
			}
			total.PendingDue += ts.PendingDue
			total.Succeeded += ts.Succeeded
		}
		if st.Total.PendingDue != total.PendingDue || st.Total.Succeeded != total.Succeeded || st.Total.RunTimeP50 != nil {
			t.Errorf("scope %v: total %+v", scope, st.Total)
		}
		if st.Window != health.DefaultWindow || time.Since(st.At) > time.Minute {
			t.Errorf("scope %v: window %s at %s", scope, st.Window, st.At)
		}
	}
	// The oldest due job of orgB is 2 minutes old, of the global scope 3.
	st, err := health.GetStats(ctx, pool, health.StatsRequest{Scope: testdb.Ptr(runledger.Organization(orgB)), JobType: "sync"})
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Types) != 1 || st.Types[0].JobType != "sync" {
		t.Fatalf("type filter: %+v", st.Types)
	}
	if age := *st.Types[0].OldestDueAge; age < 2*time.Minute || age > 3*time.Minute {
		t.Errorf("orgB's oldest due age %s, want about 2m", age)
	}
	if age := *st.Total.OldestDueAge; age < 2*time.Minute || age > 3*time.Minute {
		t.Errorf("total oldest due age %s", age)
	}
	// An empty tenant has no types, and the clock.
	st, err = health.GetStats(ctx, pool, health.StatsRequest{Scope: testdb.Ptr(runledger.Organization(uuid.New()))})
	if err != nil || len(st.Types) != 0 || st.At.IsZero() || st.Total.OldestDueAge != nil {
		t.Fatalf("empty tenant: %+v %v", st, err)
	}
}

// The window is [now - window, now) by finished_at, at the database clock:
// a job that finished exactly at its start counts, a microsecond earlier
// does not; the percentiles are those of the jobs inside.
func TestStatsWindowBoundaries(t *testing.T) {
	t.Parallel()
	if testdb.Citus() {
		// On Citus the stats' now() is the shard's transaction clock, which
		// starts when the transaction first reaches the shard: later than
		// the coordinator's clock that the inserts below wrote, so the
		// window a test builds to the microsecond is shifted by that gap.
		t.Skip("microsecond window boundaries need one clock; Citus has the coordinator's and the shard's")
	}
	ctx := testdb.Context(t)
	pool := testdb.New(t)
	testdb.InTx(t, ctx, pool, func(tx pgx.Tx) {
		// In one transaction now() stays put, so the boundaries are exact.
		window := 10 * time.Minute
		insert(t, tx, job{org: orgA, status: "SUCCEEDED", finished: window, ran: 1 * time.Second})
		insert(t, tx, job{org: orgA, status: "SUCCEEDED", finished: window + time.Microsecond, ran: 100 * time.Second})
		insert(t, tx, job{org: orgA, status: "SUCCEEDED", finished: time.Microsecond, ran: 3 * time.Second})
		insert(t, tx, job{org: orgA, status: "SUCCEEDED", finished: 0, ran: 100 * time.Second})
		insert(t, tx, job{org: orgA, status: "DEAD_LETTERED", finished: window / 2, ran: 5 * time.Second})
		insert(t, tx, job{org: orgA, status: "CANCELED", finished: window / 2})
		st, err := health.GetStats(ctx, tx, health.StatsRequest{Scope: testdb.Ptr(runledger.Organization(orgA)), Window: window})
		if err != nil {
			t.Fatal(err)
		}
		if len(st.Types) != 1 {
			t.Fatalf("types %+v", st.Types)
		}
		ts := st.Types[0]
		if ts.Succeeded != 2 || ts.DeadLettered != 1 || ts.Canceled != 1 || ts.PendingDue != 0 || ts.OldestDueAge != nil {
			t.Fatalf("window counts %+v", ts)
		}
		// Run times 1, 3, 5 seconds (the canceled job never ran).
		if *ts.RunTimeP50 != 3*time.Second || *ts.RunTimeP95 != 4800*time.Millisecond {
			t.Fatalf("run times p50 %s p95 %s, want 3s 4.8s", *ts.RunTimeP50, *ts.RunTimeP95)
		}
		all, err := health.GetStats(ctx, tx, health.StatsRequest{Window: window})
		if err != nil || len(all.Types) != 1 || all.Types[0].Succeeded != 2 || *all.Types[0].RunTimeP95 != *ts.RunTimeP95 {
			t.Fatalf("every tenant: %+v %v", all.Types, err)
		}
		// A narrower window holds the job that finished a microsecond ago.
		st, err = health.GetStats(ctx, tx, health.StatsRequest{Scope: testdb.Ptr(runledger.Organization(orgA)), Window: window / 4})
		if err != nil || len(st.Types) != 1 || st.Types[0].Succeeded != 1 || st.Types[0].Canceled != 0 || *st.Types[0].RunTimeP95 != 3*time.Second {
			t.Fatalf("a quarter window: %+v %v", st.Types, err)
		}
		// A window whose only job never ran has no run times.
		insert(t, tx, job{org: orgB, status: "CANCELED", finished: time.Second})
		st, err = health.GetStats(ctx, tx, health.StatsRequest{Scope: testdb.Ptr(runledger.Organization(orgB))})
		if err != nil || len(st.Types) != 1 || st.Types[0].Canceled != 1 || st.Types[0].RunTimeP50 != nil || st.Types[0].RunTimeP95 != nil {
			t.Fatalf("only a canceled job: %+v %v", st.Types, err)
		}
	})
}

// Bad requests fail with their code before any database work.
func TestStatsValidation(t *testing.T) {
	t.Parallel()
	pool := testdb.ClosedPool(t)
	ctx := context.Background()
	for _, c := range []struct {
		req  health.StatsRequest
		code runledger.Code
	}{
		{health.StatsRequest{Window: -time.Second}, "health.stats_window_invalid"},
		{health.StatsRequest{Window: health.MaxWindow + time.Second}, "health.stats_window_invalid"},
		{health.StatsRequest{JobType: " "}, "health.job_type_invalid"},
		{health.StatsRequest{JobType: "a\x00"}, "health.job_type_invalid"},
		{health.StatsRequest{Scope: testdb.Ptr(runledger.Organization(uuid.Nil))}, runledger.CodeOrganizationInvalid},
	} {
		_, err := health.GetStats(ctx, pool, c.req)
		testdb.WantCode(t, err, c.code)
	}
}
