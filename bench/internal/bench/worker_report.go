package bench

import (
	"fmt"
	"io"
	"sort"
)

// Text prints the worker bench's report: each system's settings, then a
// table per measure, then the ratios of the first system (runledger) to
// each other one.
func (r *WorkerReport) Text(w io.Writer) {
	fmt.Fprintf(w, "machine: %s, %d cores, %s, %s\n", r.Machine.CPU, r.Machine.Cores, r.Machine.GoVersion, r.Machine.PostgreSQL)
	keys := make([]string, 0, len(r.Settings))
	for k := range r.Settings {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(w, "  %s: %s\n", k, r.Settings[k])
	}
	var tp, phases, lat, hb, mem, notes []string
	for _, res := range r.Results {
		rtt := res.AddedRTT
		if rtt == "" {
			rtt = "direct"
		} else if rtt == "0s" {
			rtt = "proxy, +0"
		} else {
			rtt = "proxy, +" + rtt
		}
		switch res.Measure {
		case MeasureThroughput:
			cpu, wal, idx, upd := "-", "-", "-", "-"
			if c := res.Cost; c != nil {
				cpu, wal, idx = fmtCost(c.CPUPerJobUS, 1), fmtCost(c.WALBytesPerJob, 0), fmtCost(c.IndexEntriesPerJob, 1)
				upd = fmtCost(c.HeapUpdatesPerJob, 1) + " / " + fmtCost(c.HOTUpdatesPerJob, 1)
				for _, n := range c.Unavailable {
					notes = append(notes, res.System+" "+res.Config+": "+n)
				}
				for _, ph := range []struct {
					name string
					c    *ServerCost
				}{{"insert", c.Insert}, {"claim + complete", c.Work}} {
					if ph.c != nil {
						phases = append(phases, fmt.Sprintf("%s\t%s\t%s\t%s\t%s\t%s\t%s / %s\t", res.System, res.Config, ph.name,
							fmtCost(ph.c.CPUPerJobUS, 1), fmtCost(ph.c.WALBytesPerJob, 0), fmtCost(ph.c.IndexEntriesPerJob, 1),
							fmtCost(ph.c.HeapUpdatesPerJob, 1), fmtCost(ph.c.HOTUpdatesPerJob, 1)))
					}
				}
			}
			tp = append(tp, fmt.Sprintf("%s\t%s\t%s\t%d\t%.2f\t%.0f\t%s\t%s\t%s\t%s\t", res.System, res.Config, rtt, res.Jobs, res.Seconds, res.PerSecond, cpu, wal, idx, upd))
		case MeasureLatency:
			lat = append(lat, fmt.Sprintf("%s\t%s\t%d\t%.2f\t%.2f\t%.2f\t", res.System, res.Config, res.Jobs, res.P50, res.P95, res.P99))
		case MeasureHeartbeat:
			per := "-"
			if res.Intervals > 0 {
				per = fmt.Sprintf("%.4f", res.PerJobPerInterval)
			}
			hb = append(hb, fmt.Sprintf("%s\t%d\t%.2f\t%d\t%.1f\t%s\t%s\t", res.System, res.Jobs, res.Seconds, res.Statements, res.Intervals, per, res.Note))
		case MeasureMemory:
			mem = append(mem, fmt.Sprintf("%s\t%d\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t%d\t%d\t", res.System, res.Jobs, res.Seconds,
				res.RSSStartMB, res.RSSEndMB, res.HeapStartMB, res.HeapEndMB, res.GoroutinesPre, res.GoroutinesEnd))
		}
	}
	printTable(w, "\n  throughput (trivial jobs inserted beforehand in one batch; from the worker's start to the last completion committed)\n"+
		"  and, direct runs, the server's cost per job of the insert, claim and completion: backend CPU (us), WAL (bytes),\n"+
		"  index entries, heap updates / of which HOT (pg_waldump --stats=record); n/a: not measurable here\n",
		"system\tconfig\tnetwork\tjobs\tseconds\tjobs/s\tCPU us/job\tWAL B/job\tindex entries/job\tupdates / HOT per job\t", tp)
	for _, n := range notes {
		fmt.Fprintf(w, "  n/a: %s\n", n)
	}
	printTable(w, "\n  the server's cost per job by phase (the jobs' insert; the worker's claims and completions, with its polls and heartbeats)\n",
		"system\tconfig\tphase\tCPU us/job\tWAL B/job\tindex entries/job\tupdates / HOT per job\t", phases)
	printTable(w, "\n  pickup latency at a light load (one job at a time; enqueue commit to handler start, ms)\n",
		"system\tconfig\tjobs\tp50\tp95\tp99\t", lat)
	printTable(w, "\n  heartbeat overhead (every handler holds its job; statements counted on the wire)\n",
		"system\tjobs held\tseconds\tstatements\tintervals\tper job per interval\tnote\t", hb)
	printTable(w, "\n  memory of one worker running the jobs (process RSS and heap in use after a GC, MB; goroutines)\n",
		"system\tjobs\tseconds\tRSS start\tRSS end\theap start\theap end\tgoroutines start\tgoroutines end\t", mem)
	r.ratios(w)
}

// ratios prints, for each system after the first, the first's figures
// divided by its own.
func (r *WorkerReport) ratios(w io.Writer) {
	if len(r.Results) == 0 {
		return
	}
	first := r.Results[0].System
	find := func(system, config, measure, rtt string) (WorkerResult, bool) {
		for _, res := range r.Results {
			if res.System == system && res.Config == config && res.Measure == measure && res.AddedRTT == rtt {
				return res, true
			}
		}
		return WorkerResult{}, false
	}
	var lines []string
	for _, res := range r.Results {
		if res.System == first {
			continue
		}
		mine, ok := find(first, res.Config, res.Measure, res.AddedRTT)
		if !ok {
			continue
		}
		label := res.Config
		switch res.AddedRTT {
		case "":
		case "0s":
			label += ", proxy +0"
		default:
			label += ", proxy +" + res.AddedRTT
		}
		switch res.Measure {
		case MeasureThroughput:
			if res.PerSecond > 0 {
				lines = append(lines, fmt.Sprintf("%s / %s\t%s\tthroughput\t%.2fx\t\t", first, res.System, label, mine.PerSecond/res.PerSecond))
			}
			if mine.Cost != nil && res.Cost != nil {
				for _, f := range []struct {
					name         string
					mine, theirs *float64
				}{
					{"server CPU per job", mine.Cost.CPUPerJobUS, res.Cost.CPUPerJobUS},
					{"WAL per job", mine.Cost.WALBytesPerJob, res.Cost.WALBytesPerJob},
					{"index entries per job", mine.Cost.IndexEntriesPerJob, res.Cost.IndexEntriesPerJob},
				} {
					if f.mine != nil && f.theirs != nil && *f.theirs > 0 {
						lines = append(lines, fmt.Sprintf("%s / %s\t%s\t%s\t%.2fx\t\t", first, res.System, label, f.name, *f.mine / *f.theirs))
					}
				}
			}
		case MeasureLatency:
			if res.P50 > 0 && res.P95 > 0 {
				lines = append(lines, fmt.Sprintf("%s / %s\t%s\tlatency\t%.2fx\t%.2fx\t", first, res.System, label, mine.P50/res.P50, mine.P95/res.P95))
			}
		}
	}
	printTable(w, "\n  ratios, same run (throughput: above 1 means "+first+" is faster; latency p50 and p95 and the server's costs: below 1 means "+first+" is cheaper)\n",
		"systems\tconfig\tmeasure\tratio (p50)\tp95\t", lines)
}
