package bench

import (
	"strings"
	"testing"
)

// The anchor's rows name its operation, and the ratios divide the Go
// client's figures on the same path and clients by the anchor's, the
// server's cost per operation included.
func TestReportAnchorRatios(t *testing.T) {
	base := Result{Server: ServerDurable, Sources: 10_000, AddedRTT: "0s", Path: Inserted, Clients: 1}
	goRes, river := base, base
	goRes.Client, goRes.PerSecond, goRes.P50, goRes.P95 = ClientGo, 300, 2, 6
	river.Client, river.Operation, river.PerSecond, river.P50, river.P95 = "river", "Insert", 200, 4, 3
	f := func(v float64) *float64 { return &v }
	goRes.Cost = &ServerCost{Jobs: 300, CPUPerJobUS: f(30), WALBytesPerJob: f(1000)}
	river.Cost = &ServerCost{Jobs: 200, CPUPerJobUS: f(20), WALBytesPerJob: f(500)}
	other := river
	other.Path = Existing // no Go run on this path: no ratio line
	rep := &Report{Settings: Settings{Anchors: []string{"river"}}, Results: []Result{goRes, river, other}}
	var sb strings.Builder
	rep.Text(&sb)
	out := sb.String()
	if !strings.Contains(out, "river Insert") {
		t.Errorf("the anchor's row does not name its operation:\n%s", out)
	}
	var ratios []string
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) == 9 && strings.HasSuffix(f[4], "x") {
			ratios = append(ratios, strings.Join(f, " "))
		}
	}
	want := "inserted river Insert 1 1.50x 0.50x 2.00x 1.50x 2.00x"
	if len(ratios) != 1 || ratios[0] != want {
		t.Errorf("ratio lines = %q, want [%q]\n%s", ratios, want, out)
	}
}
