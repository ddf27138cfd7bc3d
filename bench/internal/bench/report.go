package bench

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"
)

// Result is one measured run.
type Result struct {
	Server   string `json:"server"`
	Sources  int    `json:"sources"`
	AddedRTT string `json:"added_rtt"`
	addedRTT time.Duration
	// Proxied: the run went through the delay proxy (also with a zero
	// delay, the baseline of the added-latency runs). HeldMS is how long
	// the proxy actually held each chunk the client sent, on average: the
	// added latency per round trip as delivered, timer overshoot included.
	Proxied bool    `json:"proxied"`
	HeldMS  float64 `json:"held_ms,omitempty"`
	Path    Path    `json:"path"`
	Client  string  `json:"client"`
	// Operation is an anchor's operation compared with Path (empty for
	// the bench's own clients).
	Operation string  `json:"operation,omitempty"`
	Clients   int     `json:"clients"`
	Seconds   float64 `json:"seconds"`
	Ops       int64   `json:"ops"`
	Errors    int64   `json:"errors"`
	// FirstError describes the first failed or unexpected operation.
	FirstError string `json:"first_error,omitempty"`
	// PerSecond is operations per second; the latencies are in
	// milliseconds.
	PerSecond  float64 `json:"per_second"`
	P50        float64 `json:"p50_ms"`
	P95        float64 `json:"p95_ms"`
	P99        float64 `json:"p99_ms"`
	RoundTrips int     `json:"round_trips"`
	// Cost is the server's cost per operation over the measured time
	// (loopback runs of the Go client and the anchors; Jobs counts
	// operations).
	Cost *ServerCost `json:"server_cost,omitempty"`
	cost *costTotals
}

// Report is the outcome of Run.
type Report struct {
	Machine  Machine  `json:"machine"`
	Settings Settings `json:"settings"`
	Results  []Result `json:"results"`
}

// Machine describes where the bench ran.
type Machine struct {
	CPU        string `json:"cpu"`
	Cores      int    `json:"cores"`
	GoVersion  string `json:"go_version"`
	PostgreSQL string `json:"postgresql"`
	Pgbench    string `json:"pgbench,omitempty"`
}

// Settings echoes the options that shape the figures.
type Settings struct {
	Servers  []string `json:"servers"`
	Sources  []int    `json:"sources"`
	Clients  []int    `json:"clients"`
	Duration string   `json:"duration"`
	Warmup   string   `json:"warmup"`
	Rounds   int      `json:"rounds"`
	AddedRTT []string `json:"added_rtt"`
	Pgbench  bool     `json:"compare_pgbench"`
	// CancelableContext: the Go calls got a cancelable context.
	CancelableContext bool `json:"cancelable_context"`
	// Anchors names the anchors that ran (Result.Client of their runs).
	Anchors []string `json:"anchors,omitempty"`
}

// group is the results of one server, seed size and added latency.
type groupKey struct {
	server   string
	sources  int
	addedRTT string
	proxied  bool
}

func (r *Report) groups() []groupKey {
	var keys []groupKey
	seen := map[groupKey]bool{}
	for _, res := range r.Results {
		k := groupKey{res.Server, res.Sources, res.AddedRTT, res.Proxied}
		if !seen[k] {
			seen[k] = true
			keys = append(keys, k)
		}
	}
	return keys
}

func (k groupKey) match(res Result) bool {
	return res.Server == k.server && res.Sources == k.sources && res.AddedRTT == k.addedRTT && res.Proxied == k.proxied
}

func (r *Report) find(k groupKey, path Path, client string, clients int) (Result, bool) {
	for _, res := range r.Results {
		if res.Server == k.server && res.Sources == k.sources && res.AddedRTT == k.addedRTT && res.Proxied == k.proxied &&
			res.Path == path && res.Client == client && res.Clients == clients {
			return res, true
		}
	}
	return Result{}, false
}

func serverTitle(kind string) string {
	switch kind {
	case ServerDurable:
		return "durable server (fsync on, synchronous_commit on)"
	case ServerFast:
		return "fast server (fsync, synchronous_commit and full_page_writes off)"
	}
	return "configured database"
}

// Text writes the report as tables: per server, seed size and added
// latency, every run; then the ratios Go/pgbench and Go/anchor; then, when runs with an
// added latency have a direct counterpart, the latency bound; and, with
// several seed sizes, the growth of p50.
func (r *Report) Text(w io.Writer) {
	fmt.Fprintf(w, "machine: %s, %d cores; %s; %s", r.Machine.CPU, r.Machine.Cores, r.Machine.GoVersion, r.Machine.PostgreSQL)
	if r.Machine.Pgbench != "" {
		fmt.Fprintf(w, "; %s", r.Machine.Pgbench)
	}
	fmt.Fprintf(w, "\neach run: %s measured after %s of warmup, %d round(s) per client rotating the order\n", r.Settings.Duration, r.Settings.Warmup, r.Settings.Rounds)
	for _, k := range r.groups() {
		fmt.Fprintf(w, "\n== %s, %d sources, %s\n", serverTitle(k.server), k.sources, rttTitle(k.addedRTT, k.proxied))
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "path\tclients\tclient\tround trips\tops/s\tp50 ms\tp95 ms\tp99 ms\terrors\theld ms\tCPU us/op\tWAL B/op\tindex entries/op\t")
		for _, res := range r.Results {
			if !k.match(res) {
				continue
			}
			held := "-"
			if res.Proxied {
				held = fmt.Sprintf("%.3f", res.HeldMS)
			}
			client := res.Client
			if res.Operation != "" {
				client += " " + res.Operation
			}
			cpu, wal, idx := "-", "-", "-"
			if c := res.Cost; c != nil {
				cpu, wal, idx = fmtCost(c.CPUPerJobUS, 1), fmtCost(c.WALBytesPerJob, 0), fmtCost(c.IndexEntriesPerJob, 1)
			}
			fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%.0f\t%.2f\t%.2f\t%.2f\t%d\t%s\t%s\t%s\t%s\t\n",
				res.Path, res.Clients, client, res.RoundTrips, res.PerSecond, res.P50, res.P95, res.P99, res.Errors, held, cpu, wal, idx)
		}
		tw.Flush()
		for _, res := range r.Results {
			if k.match(res) && res.FirstError != "" {
				fmt.Fprintf(w, "  first error, %s %s %d clients: %s\n", res.Client, res.Path, res.Clients, res.FirstError)
			}
			if k.match(res) && res.Cost != nil {
				for _, n := range res.Cost.Unavailable {
					fmt.Fprintf(w, "  n/a, %s %s %d clients: %s\n", res.Client, res.Path, res.Clients, n)
				}
			}
		}
		r.ratios(w, k)
		r.anchorRatios(w, k)
	}
	r.latencyBound(w)
	r.growth(w)
}

func rttTitle(s string, proxied bool) string {
	if d, err := time.ParseDuration(s); err == nil && d > 0 {
		return "+" + s + " per round trip (loopback delay proxy)"
	}
	if proxied {
		return "through the loopback proxy, no delay (baseline of the added-latency runs)"
	}
	return "loopback"
}

func (r *Report) ratios(w io.Writer, k groupKey) {
	var lines []string
	for _, res := range r.Results {
		if !k.match(res) || res.Client != ClientGo {
			continue
		}
		type cell struct {
			ok  bool
			res Result
		}
		var cells []cell
		found := false
		for _, c := range []string{ClientPgbenchReference, ClientPgbenchThreeTrip, ClientPgbenchPipelined} {
			other, ok := r.find(k, res.Path, c, res.Clients)
			found = found || ok
			cells = append(cells, cell{ok, other})
		}
		if !found {
			continue
		}
		line := fmt.Sprintf("%s\t%d\t", res.Path, res.Clients)
		for _, p := range cells {
			if p.ok && p.res.PerSecond > 0 && p.res.P50 > 0 {
				line += fmt.Sprintf("%.2fx\t%.2fx\t", res.PerSecond/p.res.PerSecond, res.P50/p.res.P50)
			} else {
				line += "-\t-\t"
			}
		}
		lines = append(lines, line)
	}
	printTable(w, "\n  Go / pgbench (throughput ratio: above 1 means Go is faster; p50 ratio: below 1 means Go is faster)\n",
		"path\tclients\tops/s vs reference\tp50 vs reference\tops/s vs 3-trip\tp50 vs 3-trip\tops/s vs pipelined\tp50 vs pipelined\t", lines)
}

// printTable prints title, then header and lines as right-aligned
// columns; nothing at all when there are no lines.
func printTable(w io.Writer, title, header string, lines []string) {
	if len(lines) == 0 {
		return
	}
	fmt.Fprint(w, title)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, header)
	for _, l := range lines {
		fmt.Fprintln(tw, l)
	}
	tw.Flush()
}

// latencyBound compares, for each run with an added latency d, its p50
// with the target: the direct p50 plus round trips x d, plus 10%. The
// proxy's own cost is shown beside it: the p50 through the proxy with no
// delay, and the delay it actually applied (held), timer overshoot
// included; "isolated" is the bound computed from those, which separates
// the client's round trips from the proxy's imprecision.
func (r *Report) latencyBound(w io.Writer) {
	var lines []string
	for _, res := range r.Results {
		d := res.addedRTTValue()
		if d <= 0 {
			continue
		}
		direct, okDirect := r.find(groupKey{res.Server, res.Sources, "0s", false}, res.Path, res.Client, res.Clients)
		proxied, okProxied := r.find(groupKey{res.Server, res.Sources, "0s", true}, res.Path, res.Client, res.Clients)
		rt := float64(res.RoundTrips)
		ms := float64(d) / float64(time.Millisecond)
		line := fmt.Sprintf("%s\t%d\t%s\t%s\t%d\t+%s\t%.2f\t", res.Server, res.Sources, res.Client, res.Path, res.Clients, d, res.P50)
		if okDirect {
			bound := (direct.P50 + rt*ms) * 1.10
			line += fmt.Sprintf("%.2f\t%.2f\t%s\t", direct.P50, bound, verdict(res.P50, bound))
		} else {
			line += "-\t-\t\t"
		}
		if okProxied && res.HeldMS > 0 {
			bound := (proxied.P50 + rt*res.HeldMS) * 1.10
			line += fmt.Sprintf("%.2f\t%.3f\t%.2f\t%s\t", proxied.P50, res.HeldMS, bound, verdict(res.P50, bound))
		} else {
			line += "-\t-\t-\t\t"
		}
		lines = append(lines, line)
	}
	printTable(w, "\n== added round-trip latency d: p50 against (baseline p50 + round trips x d) + 10%\n"+
		"   target: direct p50 and nominal d; isolated: p50 through the proxy without delay and the delay it actually held\n",
		"server\tseed\tclient\tpath\tclients\tadded\tp50\tdirect p50\ttarget\t\tproxied p50\theld ms\tisolated\t\t", lines)
}

func rttShort(s string, proxied bool) string {
	if d, err := time.ParseDuration(s); err == nil && d > 0 {
		return "+" + s
	}
	if proxied {
		return "proxy +0"
	}
	return "loopback"
}

func verdict(p50, bound float64) string {
	if p50 <= bound {
		return "within"
	}
	return "OVER"
}

// growth compares p50 at the largest seed with p50 at the smallest.
func (r *Report) growth(w io.Writer) {
	if len(r.Settings.Sources) < 2 {
		return
	}
	small, large := r.Settings.Sources[0], r.Settings.Sources[0]
	for _, n := range r.Settings.Sources {
		small, large = min(small, n), max(large, n)
	}
	var lines []string
	for _, res := range r.Results {
		if res.Sources != large {
			continue
		}
		base, ok := r.find(groupKey{res.Server, small, res.AddedRTT, res.Proxied}, res.Path, res.Client, res.Clients)
		if !ok || base.P50 == 0 {
			continue
		}
		lines = append(lines, fmt.Sprintf("%s\t%s\t%s\t%s\t%d\t%.2f\t%.2f\t%.2fx\t%.2fx\t",
			res.Server, rttShort(res.AddedRTT, res.Proxied), res.Client, res.Path, res.Clients, base.P50, res.P50, res.P50/base.P50, res.PerSecond/base.PerSecond))
	}
	printTable(w, fmt.Sprintf("\n== growth: %d sources against %d\n", large, small),
		fmt.Sprintf("server\tnetwork\tclient\tpath\tclients\tp50 ms at %d\tp50 ms at %d\tp50 ratio\tops/s ratio\t", small, large), lines)
}

func (res Result) addedRTTValue() time.Duration {
	if res.addedRTT > 0 {
		return res.addedRTT
	}
	d, _ := time.ParseDuration(res.AddedRTT)
	return d
}
