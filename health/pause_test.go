package health_test

import (
	"testing"
	"time"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/health"
	"github.com/runledger-go/runledger/internal/testdb"
	"github.com/runledger-go/runledger/jobs"
)

// Stats say which types are paused, per tenant and over every tenant, and
// a paused type's due jobs are still counted (they are the backlog that
// waits for the resume).
func TestStatsSayATypeIsPaused(t *testing.T) {
	t.Parallel()
	ctx := testdb.Context(t)
	pool := testdb.New(t)
	for _, typ := range []string{"mail", "sync"} {
		testdb.DefineType(t, pool, typ)
		insert(t, pool, job{org: orgA, jobType: typ, status: "PENDING", due: -time.Minute})
	}
	if _, err := jobs.PauseType(ctx, pool, "mail"); err != nil {
		t.Fatal(err)
	}
	for _, scope := range []*runledger.Scope{nil, testdb.Ptr(runledger.Organization(orgA))} {
		st, err := health.GetStats(ctx, pool, health.StatsRequest{Scope: scope})
		if err != nil {
			t.Fatal(err)
		}
		if len(st.Types) != 2 {
			t.Fatalf("types %+v", st.Types)
		}
		for _, ts := range st.Types {
			if ts.Paused != (ts.JobType == "mail") || ts.PendingDue != 1 {
				t.Fatalf("scope %v: %+v", scope, ts)
			}
		}
	}
}
