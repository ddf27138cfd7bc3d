package main

import (
	"context"
	"strings"
	"testing"

	"github.com/runledger-go/runledger/bench/internal/bench"
	"github.com/runledger-go/runledger/internal/testdb"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// The worker bench measures the server's cost per job for both systems in
// the same run, from the same counters, and prints their ratios: each
// figure is measured (the test server is local) and plausible for a
// trivial job's insert, claim and completion. Speed is not asserted.
func TestWorkerBenchServerCostBesideRiver(t *testing.T) {
	if testing.Short() {
		t.Skip("about 10 s")
	}
	rep, err := bench.RunWorkers(context.Background(), bench.WorkerOptions{
		DatabaseURL: testdb.NewURL(t), Systems: []bench.WorkerSystem{bench.RunledgerWorkers(), riverWorkers{}},
		Configs: []string{bench.WorkerTuned}, Jobs: 300, LatencySamples: 2,
	})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, r := range rep.Results {
		if r.Measure != bench.MeasureThroughput {
			continue
		}
		seen[r.System] = true
		c := r.Cost
		if c == nil || c.CPUPerJobUS == nil || c.WALBytesPerJob == nil || c.IndexEntriesPerJob == nil {
			t.Errorf("%s: server cost missing: %+v", r.System, c)
			continue
		}
		if *c.CPUPerJobUS <= 0 || *c.WALBytesPerJob <= 0 || *c.IndexEntriesPerJob < 1 {
			t.Errorf("%s: implausible server cost: CPU %.1f us, WAL %.0f B, %.1f index entries per job",
				r.System, *c.CPUPerJobUS, *c.WALBytesPerJob, *c.IndexEntriesPerJob)
		}
	}
	if !seen["runledger"] || !seen["river"] {
		t.Fatalf("throughput results of %v, want runledger and river", seen)
	}
	var sb strings.Builder
	rep.Text(&sb)
	for _, want := range []string{"runledger / river", "server CPU per job", "WAL per job", "index entries per job"} {
		if !strings.Contains(sb.String(), want) {
			t.Errorf("the report lacks %q:\n%s", want, sb.String())
		}
	}
}
