package main

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"time"
)

// report collects the soak's figures and failures and prints them as
// Markdown, ready for docs/RELIABILITY.md.
type report struct {
	cfg     config
	started time.Time
	elapsed time.Duration
	server  string

	mu       sync.Mutex
	samples  []sample
	checks   []checkResult
	acks     map[string]int64
	failures []string
	final    struct {
		jobs, events, replays int64
		statuses              string
		// The worker runtime's jobs: by kind and final status, side
		// effects, jobs that needed more than one attempt, PROGRESS events.
		work                               string
		effects, workRetried, workProgress int64
	}
	rt    *runtimeLoad
	watch *watch
	dups  duplicates
}

func (r *report) addSample(s sample) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.samples = append(r.samples, s)
}

// fail records a reason for the soak to exit 1.
func (r *report) fail(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failures = append(r.failures, fmt.Sprintf(format, args...))
}

// judge turns the clients' failures, the error window and the invariants
// into failures of the soak.
func (r *report) judge(st *stats) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.nUnexpected > 0 {
		r.fail("%d operations failed with an error that is not retryable, or broke an expectation (listed below)", st.nUnexpected)
	}
	switch {
	case st.restartEnded.IsZero():
		r.fail("no restart completed")
	case len(st.errs) == 0:
		r.fail("no operation met an error: the restart did not hit the load")
	default:
		windowEnd := st.restartEnded.Add(r.cfg.window)
		if st.firstErr.Before(st.restartBegan) || st.lastErr.After(windowEnd) {
			r.fail("retryable errors from %s to %s relative to the restart's beginning, outside the window [0, %s]",
				rel(st.firstErr, st.restartBegan), rel(st.lastErr, st.restartBegan), rel(windowEnd, st.restartBegan))
		}
	}
	for _, c := range r.checks {
		if c.violations != 0 {
			r.fail("invariant %q: %d violations", c.name, c.violations)
		}
	}
	r.judgeRuntime(st)
}

// judgeRuntime fails the soak when the worker's Run failed, its jobs did
// not drain, the restart left no trace in its log (it did not hit the
// worker), or it logged a warning or error away from the restart (the
// panic kind's records aside).
func (r *report) judgeRuntime(st *stats) {
	rt := r.rt
	if rt == nil {
		return
	}
	rt.mu.Lock()
	runErr, drainErr := rt.runErr, rt.drainErr
	rt.mu.Unlock()
	if runErr != nil {
		r.fail("worker: Run returned %v", runErr)
	}
	if drainErr != nil {
		r.fail("worker: %v", drainErr)
	}
	// Around the restart a claim whose reply was lost leaves leases the
	// worker never learned of (recovered when they expire): only samples
	// away from it are held to the bound.
	for _, s := range r.samples {
		near := !st.restartBegan.IsZero() && !s.taken.Before(st.restartBegan) &&
			(st.restartEnded.IsZero() || !s.taken.After(st.restartEnded.Add(r.cfg.window)))
		if !near && s.workerLeases > int64(r.cfg.workerConcurrency) {
			r.fail("worker: held %d leases at %s, away from the restart, over its Concurrency %d", s.workerLeases, s.at.Round(time.Second), r.cfg.workerConcurrency)
		}
	}
	if w := r.watch; w != nil {
		if w.over > 0 {
			r.fail("worker: %d lease readings away from the restart found a worker over its Concurrency %d (first: %s)", w.over, r.cfg.workerConcurrency, w.firstOver)
		}
		if w.deadlocks > 0 {
			r.fail("%d deadlocks on the server during the soak (pg_stat_database.deadlocks)", w.deadlocks)
		}
		if w.readings > 0 && w.failed == w.readings {
			r.fail("watch: no reading of the leases and the deadlock counter succeeded")
		}
	}
	if d := r.dups; d.err == nil {
		if d.twice.away > 0 || d.unended.away > 0 {
			r.fail("worker: duplicate attempts away from the restart: %d attempts whose side effect was recorded twice, %d attempts after one that never ended in a failure",
				d.twice.away, d.unended.away)
		}
		if c := d.unplanned[recoveryDeadLetter]; c != nil && c.away > 0 {
			r.fail("worker: %d jobs dead-lettered by lease recovery away from the restart (a worker lost a lease with no fault)", c.away)
		}
	}
	if st.restartEnded.IsZero() {
		return
	}
	windowEnd := st.restartEnded.Add(r.cfg.window)
	rt.logs.mu.Lock()
	defer rt.logs.mu.Unlock()
	hit := false
	for k, a := range rt.logs.recs {
		if k.msg == expectedLog {
			continue
		}
		hit = true
		if a.first.Before(st.restartBegan) || a.last.After(windowEnd) {
			r.fail("worker logged %q (%s) from %s to %s relative to the restart's beginning, outside the window [0, %s]",
				k.msg, k.level, rel(a.first, st.restartBegan), rel(a.last, st.restartBegan), rel(windowEnd, st.restartBegan))
		}
	}
	if !hit {
		r.fail("worker: no warning in its log: the restart did not hit the worker")
	}
}

// rel is t relative to base, signed, in seconds to the millisecond.
func rel(t, base time.Time) string {
	return fmt.Sprintf("%+.3f s", t.Sub(base).Seconds())
}

func (r *report) print(w io.Writer, st *stats) {
	st.mu.Lock()
	defer st.mu.Unlock()
	r.mu.Lock()
	defer r.mu.Unlock()

	fmt.Fprintf(w, "## Soak: %s, %d clients and %d workers, one %s restart\n\n", r.elapsed.Round(time.Second), r.cfg.clients, r.cfg.workers, r.cfg.restartMode)
	fmt.Fprintf(w, "- server: PostgreSQL %s (pgserver, Durable)\n", r.server)
	if !st.restartEnded.IsZero() {
		fmt.Fprintf(w, "- restart (%s) began at %s into the load and took %s (until the server accepted connections again)",
			r.cfg.restartMode, st.restartBegan.Sub(st.start).Round(time.Millisecond), st.restartEnded.Sub(st.restartBegan).Round(time.Millisecond))
		if r.cfg.restartDown > 0 {
			fmt.Fprintf(w, ", the server down for %s of it", r.cfg.restartDown)
		}
		fmt.Fprintf(w, "\n")
	}
	fmt.Fprintf(w, "- lease %s, samples every %s, retryable errors allowed from the restart's beginning to %s after its end\n\n",
		r.cfg.lease, r.cfg.sample, r.cfg.window)

	fmt.Fprintf(w, "### Operations\n\n| kind | count | per second |\n|---|---:|---:|\n")
	var total int64
	kinds := reportOrder
	for _, k := range kinds {
		if !strings.HasPrefix(k, "  ") {
			total += st.ops[k]
		}
	}
	secs := r.elapsed.Seconds()
	for _, k := range kinds {
		n := st.ops[k]
		if strings.HasPrefix(k, "  ") {
			fmt.Fprintf(w, "| &nbsp;&nbsp;%s | %d | |\n", strings.TrimSpace(k), n)
			continue
		}
		fmt.Fprintf(w, "| %s | %d | %.1f |\n", k, n, float64(n)/secs)
	}
	fmt.Fprintf(w, "| **all operations** | **%d** | **%.1f** |\n\n", total, float64(total)/secs)

	r.printRuntime(w, st)

	fmt.Fprintf(w, "### Retryable errors (each retried with the same request)\n\n")
	if len(st.errs) == 0 {
		fmt.Fprintf(w, "None.\n\n")
	} else {
		fmt.Fprintf(w, "| operation | class | cause | failed attempts | first | last |\n|---|---|---|---:|---:|---:|\n")
		keys := make([]errKey, 0, len(st.errs))
		for k := range st.errs {
			keys = append(keys, k)
		}
		sort.Slice(keys, func(i, j int) bool {
			a, b := keys[i], keys[j]
			if a.op != b.op {
				return a.op < b.op
			}
			if a.class != b.class {
				return a.class < b.class
			}
			return a.cause < b.cause
		})
		byClass := map[string]int64{}
		for _, k := range keys {
			a := st.errs[k]
			byClass[k.class] += a.count
			fmt.Fprintf(w, "| %s | %s | %s | %d | %s | %s |\n", k.op, k.class, k.cause, a.count,
				rel(a.first, st.restartBegan), rel(a.last, st.restartBegan))
		}
		fmt.Fprintf(w, "\nBy class: %s. Times are relative to the restart's beginning; ", formatCounts(byClass))
		fmt.Fprintf(w, "every error fell between %s and %s (the server accepted connections again at %s).\n\n",
			rel(st.firstErr, st.restartBegan), rel(st.lastErr, st.restartBegan), rel(st.restartEnded, st.restartBegan))
	}
	if st.nUnexpected > 0 {
		fmt.Fprintf(w, "### Failed operations (%d)\n\n", st.nUnexpected)
		for _, u := range st.unexpected {
			fmt.Fprintf(w, "- %s\n", u)
		}
		fmt.Fprintln(w)
	}

	fmt.Fprintf(w, "### Samples\n\nRSS is VmRSS from /proc/self/status; Go heap is runtime.MemStats.HeapInuse. ")
	fmt.Fprintf(w, "Server connections are pg_stat_activity client backends: the client pool's (of which idle in a transaction at that instant), the worker pool's, and all (the monitor's and the producer's included). The last samples are taken as the clients stop, once the worker has drained its jobs, and once it has stopped.\n\n")
	fmt.Fprintf(w, "| t | RSS MiB | Go heap MiB | goroutines | pool conns | server conns: clients (idle in tx) / worker / all | worker pool conns | jobs pending / leased / total | ops/s | note |\n")
	fmt.Fprintf(w, "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n")
	for _, s := range r.samples {
		note := s.note
		if s.serverErr != "" {
			note = strings.TrimSpace(note + " server: " + s.serverErr)
		}
		srv := fmt.Sprintf("%d (%d) / %d / %d", s.serverConns, s.idleInTx, s.workerConns, s.allClients)
		q := fmt.Sprintf("%d / %d / %d", s.pending, s.leased, s.jobs)
		if s.serverConns < 0 {
			srv, q = "-", "-"
		}
		fmt.Fprintf(w, "| %s | %.1f | %.1f | %d | %d | %s | %d | %s | %.0f | %s |\n",
			s.at.Round(time.Second), float64(s.rssKB)/1024, float64(s.heapInuse)/(1<<20), s.goroutines, s.poolConns,
			srv, s.workerPool, q, s.opsPerSec, note)
	}
	fmt.Fprintln(w)
	r.printFlatness(w)

	fmt.Fprintf(w, "### Ledger invariants (SQL, after the load)\n\n")
	fmt.Fprintf(w, "Acknowledgements loaded: %s. Ledger: %d jobs (%s), %d events, %d lineage rows.\n\n",
		formatCounts(r.acks), r.final.jobs, r.final.statuses, r.final.events, r.final.replays)
	fmt.Fprintf(w, "| check | violations | |\n|---|---:|---|\n")
	for _, c := range r.checks {
		fmt.Fprintf(w, "| %s | %d | %s |\n", c.name, c.violations, c.note)
	}
	fmt.Fprintln(w)

	if len(r.failures) == 0 {
		fmt.Fprintf(w, "**PASS**\n")
		return
	}
	fmt.Fprintf(w, "**FAIL**\n\n")
	for _, f := range r.failures {
		fmt.Fprintf(w, "- %s\n", f)
	}
}

// printFlatness summarizes the samples after warm-up (the first minute, or
// the first quarter of a shorter run): range of RSS, heap and server
// connections, the restart's sample excluded from the connection range.
func (r *report) printFlatness(w io.Writer) {
	warm := time.Minute
	if q := r.elapsed / 4; q < warm {
		warm = q
	}
	var rssMin, rssMax, heapMin, heapMax int64 = -1, -1, -1, -1
	connMin, connMax, wMin, wMax, gMin, gMax := -1, -1, -1, -1, -1, -1
	var n int
	for _, s := range r.samples {
		if s.at < warm {
			continue
		}
		n++
		h := int64(s.heapInuse)
		if rssMin < 0 || s.rssKB < rssMin {
			rssMin = s.rssKB
		}
		if s.rssKB > rssMax {
			rssMax = s.rssKB
		}
		if heapMin < 0 || h < heapMin {
			heapMin = h
		}
		if h > heapMax {
			heapMax = h
		}
		if s.note != "" {
			continue // the load has stopped: goroutines and connections go down
		}
		if gMin < 0 || s.goroutines < gMin {
			gMin = s.goroutines
		}
		if s.goroutines > gMax {
			gMax = s.goroutines
		}
		if s.serverConns >= 0 {
			if connMin < 0 || s.serverConns < connMin {
				connMin = s.serverConns
			}
			if s.serverConns > connMax {
				connMax = s.serverConns
			}
			if wMin < 0 || s.workerConns < wMin {
				wMin = s.workerConns
			}
			if s.workerConns > wMax {
				wMax = s.workerConns
			}
		}
	}
	if n == 0 {
		return
	}
	fmt.Fprintf(w, "After warm-up (%s, %d samples, the ones after the load excluded from the last three): RSS %.1f to %.1f MiB, Go heap %.1f to %.1f MiB, goroutines %d to %d, client server connections %d to %d, worker server connections %d to %d.\n\n",
		warm.Round(time.Second), n, float64(rssMin)/1024, float64(rssMax)/1024,
		float64(heapMin)/(1<<20), float64(heapMax)/(1<<20), gMin, gMax, connMin, connMax, wMin, wMax)
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// formatCounts prints a map as "k1 n1, k2 n2" in key order.
func formatCounts(m map[string]int64) string {
	if len(m) == 0 {
		return "none"
	}
	parts := make([]string, 0, len(m))
	for _, k := range sortedKeys(m) {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

// printRuntime prints the worker runtime's section: its configuration, the
// jobs by kind and final state, and what it logged.
func (r *report) printRuntime(w io.Writer, st *stats) {
	rt := r.rt
	if rt == nil {
		return
	}
	rt.mu.Lock()
	defer rt.mu.Unlock()
	fmt.Fprintf(w, "### Worker runtime\n\n")
	var enqueued int64
	for _, n := range rt.enqueued {
		enqueued += n
	}
	fmt.Fprintf(w, "%d worker.Worker instances in this process (ids %s%d to %d, each with %d handlers, lease %s, heartbeats every %s, recovery every %s, its own pool of %d connections) for the whole load; jobs enqueued with a chosen id at up to %d/s, %d at a time (%.1f/s achieved); ",
		r.cfg.workers, workerIDPrefix, 1, r.cfg.workers, r.cfg.workerConcurrency, r.cfg.workerLease, (r.cfg.workerLease / 3).Round(time.Millisecond), r.cfg.workerRecovery, workerPoolSize(r.cfg),
		r.cfg.workerRate, producerInFlight, float64(enqueued)/r.elapsed.Seconds())
	if rt.drainErr == nil {
		fmt.Fprintf(w, "after the load it drained the rest in %s and shut down (Run returned %v).\n\n", rt.drained.Round(time.Millisecond), rt.runErr)
	} else {
		fmt.Fprintf(w, "it did not drain: %v.\n\n", rt.drainErr)
	}
	fmt.Fprintf(w, "- enqueued by kind: %s\n", formatCounts(rt.enqueued))
	fmt.Fprintf(w, "- final state by kind: %s\n", r.final.work)
	fmt.Fprintf(w, "- side effects recorded: %d; jobs that needed more than one attempt: %d; PROGRESS events (long jobs): %d\n",
		r.final.effects, r.final.workRetried, r.final.workProgress)
	if wt := r.watch; wt != nil {
		fmt.Fprintf(w, "- readings every %s (%d, %d of them failed: the restart): ", r.cfg.leaseSample, wt.readings, wt.failed)
		fmt.Fprintf(w, "leases held at once, by worker, at most (away from the restart / all): ")
		for i, id := range wt.ids {
			if i > 0 {
				fmt.Fprintf(w, ", ")
			}
			fmt.Fprintf(w, "%s %d / %d", id, wt.maxAway[id], wt.maxLeases[id])
		}
		fmt.Fprintf(w, " (Concurrency %d; readings over it away from the restart: %d)\n", r.cfg.workerConcurrency, wt.over)
		fmt.Fprintf(w, "- deadlocks: pg_stat_database.deadlocks rose by %d over the run (every client's included)\n", wt.deadlocks)
		fmt.Fprintf(w, "- process (clients, producer and workers together), at most: HeapAlloc %.1f MiB, Sys %.1f MiB, %d goroutines\n",
			float64(wt.maxHeapAlloc)/(1<<20), float64(wt.maxSys)/(1<<20), wt.maxGoroutines)
	}
	if d := r.dups; d.err == nil {
		fmt.Fprintf(w, "- duplicate attempts (near the restart / away from it): (job, attempt) whose side effect was recorded twice %d / %d; attempts n >= 2 whose attempt n-1 never ended in a failure (no RETRY_SCHEDULED: not failed, timed out or recovered) %d / %d\n",
			d.twice.near, d.twice.away, d.unended.near, d.unended.away)
		fmt.Fprintf(w, "- retries no handler asked for, by failure kind (near / away): ")
		if len(d.unplanned) == 0 {
			fmt.Fprintf(w, "none")
		}
		for i, k := range sortedKeys(d.unplanned) {
			if i > 0 {
				fmt.Fprintf(w, ", ")
			}
			fmt.Fprintf(w, "%s %d / %d", k, d.unplanned[k].near, d.unplanned[k].away)
		}
		fmt.Fprintf(w, "\n")
	}
	fmt.Fprintln(w)
	rt.logs.mu.Lock()
	defer rt.logs.mu.Unlock()
	if len(rt.logs.recs) == 0 {
		fmt.Fprintf(w, "The worker logged no warning or error.\n\n")
		return
	}
	keys := make([]logKey, 0, len(rt.logs.recs))
	for k := range rt.logs.recs {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].msg < keys[j].msg })
	fmt.Fprintf(w, "| worker log (warning and above) | level | count | first | last |\n|---|---|---:|---:|---:|\n")
	for _, k := range keys {
		a := rt.logs.recs[k]
		first, last := "", ""
		if !st.restartBegan.IsZero() {
			first, last = rel(a.first, st.restartBegan), rel(a.last, st.restartBegan)
		}
		fmt.Fprintf(w, "| %s | %s | %d | %s | %s |\n", k.msg, k.level, a.count, first, last)
	}
	fmt.Fprintf(w, "\nTimes are relative to the restart's beginning; %q is the panic kind's, expected wherever it falls.\n\n", expectedLog)
}
