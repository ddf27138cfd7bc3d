package bench

import (
	"context"
	"testing"
	"time"

	"github.com/runledger-go/runledger/internal/testdb"
)

// The replay bench measures the server's cost per operation over the
// measured time of each loopback run: backend CPU on every path, and on
// the inserted path (a new replay job, its event and lineage row) WAL and
// index entries. Speed is not asserted.
func TestReplayBenchServerCost(t *testing.T) {
	if testing.Short() {
		t.Skip("a few seconds")
	}
	rep, err := Run(context.Background(), Options{
		DatabaseURL: testdb.NewURL(t), Sources: []int{200}, Clients: []int{2},
		Paths: []Path{Inserted, Existing}, Duration: time.Second, Warmup: 200 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for _, r := range rep.Results {
		if r.Client != ClientGo {
			continue
		}
		seen++
		c := r.Cost
		if c == nil || len(c.Unavailable) > 0 || c.CPUPerJobUS == nil || c.WALBytesPerJob == nil || c.IndexEntriesPerJob == nil {
			t.Errorf("%s: server cost missing: %+v", r.Path, c)
			continue
		}
		if c.Jobs < 1 || *c.CPUPerJobUS <= 0 || c.Backends < 2 {
			t.Errorf("%s: %d operations, CPU %.1f us per operation over %d backends", r.Path, c.Jobs, *c.CPUPerJobUS, c.Backends)
		}
		if r.Path == Inserted && (*c.WALBytesPerJob < 100 || *c.IndexEntriesPerJob < 1) {
			t.Errorf("inserted: %.0f WAL bytes and %.1f index entries per operation", *c.WALBytesPerJob, *c.IndexEntriesPerJob)
		}
	}
	if seen != 2 {
		t.Errorf("%d Go results, want 2: %+v", seen, rep.Results)
	}
}
