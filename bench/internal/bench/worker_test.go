package bench

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/runledger-go/runledger/internal/testdb"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// The worker bench runs this project's worker end to end on a small scale:
// every measure gives a figure, the jobs all complete, and the heartbeat
// round is one statement for all the jobs held (at most one per job per
// interval, the target). Speed is not asserted.
func TestWorkerBenchRunsTheRunledgerWorker(t *testing.T) {
	if testing.Short() {
		t.Skip("about 10 s")
	}
	rep, err := RunWorkers(context.Background(), WorkerOptions{
		DatabaseURL: testdb.NewURL(t), Systems: []WorkerSystem{RunledgerWorkers()},
		Jobs: 300, DefaultJobs: 100, LatencySamples: 5, HeartbeatJobs: 20, MemoryJobs: 200, AddedRTT: time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]WorkerResult{}
	for _, r := range rep.Results {
		got[r.Config+" "+r.Measure+" "+r.AddedRTT] = r
	}
	for _, k := range []string{"defaults throughput ", "tuned throughput ", "tuned throughput 0s", "tuned throughput 1ms",
		"defaults latency ", "tuned latency ", "heartbeat heartbeat ", "tuned memory "} {
		r, ok := got[k]
		if !ok {
			t.Errorf("no result for %q: %+v", k, rep.Results)
			continue
		}
		switch r.Measure {
		case MeasureThroughput:
			if r.PerSecond <= 0 {
				t.Errorf("%s: %+v", k, r)
			}
			// The direct runs carry the server's cost per job; the proxied
			// ones do not (they measure the network).
			if r.AddedRTT == "" {
				checkPlausibleCost(t, k, r.Cost)
			} else if r.Cost != nil {
				t.Errorf("%s: a proxied run has a server cost: %+v", k, r.Cost)
			}
		case MeasureLatency:
			// A pickup can start before the enqueue's reply reaches the
			// client (it is counted as 0), so a loaded machine may see
			// zeros; every sample must be there, in order.
			if r.Jobs != 5 || r.P50 < 0 || r.P95 < r.P50 {
				t.Errorf("%s: %+v", k, r)
			}
		case MeasureHeartbeat:
			if r.Statements < 1 || r.PerJobPerInterval > 1 {
				t.Errorf("%s: %d statements for %d jobs over %.1f intervals: want at least one, at most one per job per interval", k, r.Statements, r.Jobs, r.Intervals)
			}
		case MeasureMemory:
			if r.RSSEndMB <= 0 || r.GoroutinesEnd <= 0 {
				t.Errorf("%s: %+v", k, r)
			}
		}
	}
	var sb strings.Builder
	rep.Text(&sb)
	if !strings.Contains(sb.String(), "pickup latency") || !strings.Contains(sb.String(), "WAL B/job") || !strings.Contains(sb.String(), "claim + complete") {
		t.Errorf("the report lacks the latency table:\n%s", sb.String())
	}
}

// The ratios divide the first system's figures by each other system's, on
// the same configuration and network.
func TestWorkerReportRatios(t *testing.T) {
	rep := &WorkerReport{Settings: map[string]string{}, Results: []WorkerResult{
		{System: "runledger", Config: WorkerTuned, Measure: MeasureThroughput, PerSecond: 3000},
		{System: "river", Config: WorkerTuned, Measure: MeasureThroughput, PerSecond: 2000},
		{System: "runledger", Config: WorkerTuned, Measure: MeasureThroughput, AddedRTT: "1ms", PerSecond: 1000},
		{System: "river", Config: WorkerTuned, Measure: MeasureThroughput, AddedRTT: "1ms", PerSecond: 2000},
		{System: "runledger", Config: WorkerDefaults, Measure: MeasureLatency, P50: 1, P95: 3},
		{System: "river", Config: WorkerDefaults, Measure: MeasureLatency, P50: 2, P95: 2},
	}}
	var sb strings.Builder
	rep.Text(&sb)
	var ratios []string
	for _, line := range strings.Split(sb.String(), "\n") {
		if strings.Contains(line, "runledger / river") {
			ratios = append(ratios, strings.Join(strings.Fields(line), " "))
		}
	}
	want := []string{
		"runledger / river tuned throughput 1.50x",
		"runledger / river tuned, proxy +1ms throughput 0.50x",
		"runledger / river defaults latency 0.50x 1.50x",
	}
	if strings.Join(ratios, "\n") != strings.Join(want, "\n") {
		t.Errorf("ratio lines:\n%s\nwant:\n%s\n%s", strings.Join(ratios, "\n"), strings.Join(want, "\n"), sb.String())
	}
}

// checkPlausibleCost checks that every figure of the server's cost was
// measured (the test server is local, its pg_waldump beside it) and is in
// the range one trivial job's insert, claim and completion can take: some
// WAL and CPU, at least the primary key's index entry and the claim's
// update.
func checkPlausibleCost(t *testing.T, name string, c *ServerCost) {
	t.Helper()
	if c == nil {
		t.Errorf("%s: no server cost", name)
		return
	}
	if len(c.Unavailable) > 0 || c.CPUPerJobUS == nil || c.WALBytesPerJob == nil || c.IndexEntriesPerJob == nil ||
		c.HeapUpdatesPerJob == nil || c.HOTUpdatesPerJob == nil {
		t.Errorf("%s: a figure is missing: %s (%v)", name, c.summary(), c.Unavailable)
		return
	}
	if *c.CPUPerJobUS <= 0 || *c.CPUPerJobUS > 1e6 || c.Backends < 1 {
		t.Errorf("%s: server CPU %.1f us per job over %d backends", name, *c.CPUPerJobUS, c.Backends)
	}
	if *c.WALBytesPerJob < 100 || *c.WALBytesPerJob > 1<<20 {
		t.Errorf("%s: %.0f WAL bytes per job", name, *c.WALBytesPerJob)
	}
	if *c.IndexEntriesPerJob < 1 || *c.IndexEntriesPerJob > 1000 {
		t.Errorf("%s: %.1f index entries per job", name, *c.IndexEntriesPerJob)
	}
	if *c.HeapUpdatesPerJob < 1 || *c.HOTUpdatesPerJob > *c.HeapUpdatesPerJob {
		t.Errorf("%s: %.1f heap updates per job, %.1f HOT", name, *c.HeapUpdatesPerJob, *c.HOTUpdatesPerJob)
	}
	// The phases add up to the whole: the insert writes WAL and index
	// entries, and so do the claims and completions.
	if c.Insert == nil || c.Work == nil {
		t.Errorf("%s: no phases: %+v", name, c)
		return
	}
	for _, ph := range []*ServerCost{c.Insert, c.Work} {
		if ph.WALBytesPerJob == nil || *ph.WALBytesPerJob <= 0 || ph.IndexEntriesPerJob == nil || *ph.IndexEntriesPerJob < 1 {
			t.Errorf("%s: a phase without WAL or index entries: %s", name, ph.summary())
		}
	}
	if sum := *c.Insert.WALBytesPerJob + *c.Work.WALBytesPerJob; math.Abs(sum-*c.WALBytesPerJob) > 1e-6**c.WALBytesPerJob {
		t.Errorf("%s: the phases' WAL per job adds up to %.1f, the whole is %.1f", name, sum, *c.WALBytesPerJob)
	}
}

// pg_waldump's record statistics are read by type; the totals lines and
// headers are not records.
func TestParseWaldumpStats(t *testing.T) {
	out := []byte(`Type                                           N      (%)          Record size      (%)             FPI size      (%)        Combined size      (%)
----                                           -      ---          -----------      ---             --------      ---        -------------      ---
Heap/INSERT                                  300 ( 20.00)                22500 ( 25.00)                    0 (  0.00)                22500 ( 20.00)
Heap/HOT_UPDATE                              250 ( 10.00)                 2500 (  2.00)                    0 (  0.00)                 2500 (  2.00)
Heap/UPDATE                                   50 ( 10.00)                 2500 (  2.00)                    0 (  0.00)                 2500 (  2.00)
Btree/INSERT_LEAF                            900 ( 60.00)                60000 ( 70.00)                 8192 (100.00)                68192 ( 75.00)
                                        --------                      --------                      --------                      --------
Total                                       1500                         87500 [90.00%]                 8192 [10.00%]                95692 [100%]
`)
	got := parseWaldumpStats(out)
	want := map[string]int64{"Heap/INSERT": 300, "Heap/HOT_UPDATE": 250, "Heap/UPDATE": 50, "Btree/INSERT_LEAF": 900}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: got %d, want %d", k, got[k], v)
		}
	}
}
