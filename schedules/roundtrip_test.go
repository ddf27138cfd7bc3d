package schedules_test

import (
	"fmt"
	"testing"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/internal/testdb"
	"github.com/runledger-go/runledger/jobs"
	"github.com/runledger-go/runledger/schedules"
)

// TestFireDueRoundTrips pins what a firing round costs on one server: 5
// round trips (BEGIN, the clock, the claim, the blocked report, COMMIT)
// plus, for a schedule firing one tick, 3 (the enqueue's isolation check,
// its pipelined insert and lookup, the cursor's update); 5 for a round
// with nothing due.
func TestFireDueRoundTrips(t *testing.T) {
	t.Parallel()
	if testdb.Citus() {
		t.Skip("one server's statements; Citus adds the tenant listing and a claim per tenant")
	}
	pool, counter := testdb.CountingPool(t)
	ctx := testdb.Context(t)
	testdb.Define(t, ctx, pool, jobs.DefinitionInput{JobType: "report"})
	const k = 4
	for i := range k {
		upsert(t, ctx, pool, schedules.UpsertRequest{Scope: runledger.Global(), Name: fmt.Sprint("s", i), Cron: "0 * * * *", JobType: "report"})
	}
	// Warm the process's cache of whether the database runs Citus and
	// the connection's prepared statements with one fire.
	upsert(t, ctx, pool, schedules.UpsertRequest{Scope: runledger.Global(), Name: "warm", Cron: "0 * * * *", JobType: "report"})
	testdb.Exec(t, pool, `UPDATE job_schedules SET next_fire_at = date_trunc('hour', now()) WHERE name = 'warm'`)
	if res := fireDue(t, ctx, pool, schedules.FireRequest{}); len(res.Fired) != 1 {
		t.Fatalf("warm-up fired %+v", res.Fired)
	}
	if n := testdb.Trips(counter, func() { fireDue(t, ctx, pool, schedules.FireRequest{}) }); n != 5 {
		t.Errorf("an idle round: %d round trips, want 5", n)
	}
	testdb.Exec(t, pool, `UPDATE job_schedules SET next_fire_at = date_trunc('hour', now()) WHERE name <> 'warm'`)
	var res schedules.FireResult
	n := testdb.Trips(counter, func() { res = fireDue(t, ctx, pool, schedules.FireRequest{}) })
	if len(res.Fired) != k || n != 5+3*k {
		t.Errorf("fired %d in %d round trips, want %d in %d", len(res.Fired), n, k, 5+3*k)
	}
}
