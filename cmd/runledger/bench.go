package main

import (
	"context"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/runledger-go/runledger/cmd/runledger/internal/bench"
)

var benchCmd = &command{
	name:    "bench",
	summary: "Measure compare-and-replay throughput and latency, optionally beside pgbench doing the same work.",
	help: `Seeds a database with succeeded source jobs (each already replayed once,
so the lineage table is as large), then for each number of clients and
each path runs replay.SucceededJob in a loop for --duration after a
--warmup, and prints throughput and p50/p95/p99 latency per path:
inserted (a new key: a replay is created), existing (an idempotent
retry), mismatch (a stale expected run) and not_found (a missing job),
each one round trip. A progress line shows while a run goes on (on stderr).

With --compare-pgbench it runs, right after each Go run and against the
same database, the pgbench scripts doing the same work (shipped in
cmd/runledger/internal/bench/scripts, embedded in the binary): the
reference protocol, one statement per round trip (9, 4, 6 and 6 round
trips); the three-round-trip pipeline this project used before (3, 2, 3
and 3); and this project's protocol (\startpipeline, the same statements
in the same one round trip as the Go client); then prints the ratios
Go/pgbench per path and client count. pgbench is looked for next to the
PostgreSQL server binaries (where the throwaway server's come from), then
on PATH (or give --pgbench).

--added-rtt adds a fixed latency to every round trip, through a loopback
TCP proxy that holds each chunk a client sends, so the effect of round
trips on a real network shows on one machine; a list (0,1ms) runs each and
compares the p50 with the direct p50 plus round trips x latency. A list of
--sources (10000,1000000) seeds one database per size and compares p50.

Database: --database-url or DATABASE_URL (migrated; rows of the job type
runledger-bench and the helper functions runledger_bench_* are replaced by
each run); without one, a throwaway local PostgreSQL server per
durability: by default both a durable one (PostgreSQL's defaults: fsync and
synchronous_commit on) and a fast one (fsync, synchronous_commit and
full_page_writes off); --durable or --fast picks one. The throwaway servers
run with shared_buffers=1GB and max_wal_size=8GB, and are removed at the
end.

Output (--json): {"machine":{...},"settings":{...},"results":[{"server",
"sources","added_rtt","path","client","clients","seconds","ops","errors",
"per_second","p50_ms","p95_ms","p99_ms","round_trips","proxied","held_ms"}, ...]}

With --workers it runs the worker bench instead: this project's worker
runtime (package worker) runs trivial jobs on a throwaway durable server
(or --database-url), in two configurations with the same worker count as
River's (defaults: 50 workers, everything else at its defaults; tuned:
1,000 workers, a 50 ms poll), and reports the throughput of
--worker-jobs jobs inserted beforehand in one batch (--worker-default-jobs
for the defaults), the pickup latency of --worker-latency-samples jobs
enqueued one at a time (p50/p95/p99 from the enqueue's commit to the
handler's start), the tuned throughput through the proxy without delay
and with the first --added-rtt (default 1ms; 0 skips it), the statements
per job per heartbeat interval while --worker-heartbeat-jobs jobs are
held (counted on the wire), and RSS, heap and goroutines before and after
one worker ran --worker-memory-jobs jobs (0 skips either). The same bench
beside River v0.51.2 in one run: make bench-worker (the nested module
cmd/runledger/internal/bench/river, go run . -workers).

Exit codes: 0 done (also when some operations failed: see the errors
column); 1 the database or pgbench could not be run; 2 bad flags.`,
	setup: func(fs *flagSet) runFunc {
		sources := fs.str("sources", "`N[,N...]`: succeeded sources to seed, one database per size (default 10000).")
		clients := fs.str("clients", "`N[,N...]`: concurrent clients (default 1,16).")
		duration := fs.duration("duration", 5*time.Second, "`D`: measured time per run, whole seconds.")
		warmup := fs.duration("warmup", time.Second, "`D`: unmeasured load before each run.")
		rounds := fs.intDefault("rounds", 1, "`N`: repeat each run N times, rotating the order of Go and the pgbench scripts, and report them together.")
		rtt := fs.str("added-rtt", "`D[,D...]`: latency added to every round trip through a loopback proxy (default 0: direct).")
		paths := fs.list("paths", "`P[,P...]`: paths to run: inserted, existing, mismatch, not_found (default all).")
		compare := fs.boolean("compare-pgbench", false, "Also run the pgbench scripts (reference, three-round-trip and pipelined) and print the ratios.")
		cancelable := fs.boolean("cancelable-context", false, "Give every Go call a cancelable context, as a request handler would (pgx then watches it with a goroutine per round trip); by default the calls' context cannot be canceled.")
		pgbenchBin := fs.str("pgbench", "`PATH`: the pgbench binary.")
		workers := fs.boolean("workers", false, "Run the worker bench (the worker runtime's throughput, pickup latency, heartbeat overhead and memory) instead.")
		workerJobs := fs.intDefault("worker-jobs", 50_000, "`N`: --workers: jobs of a tuned throughput run.")
		workerDefaultJobs := fs.intDefault("worker-default-jobs", 5_000, "`N`: --workers: jobs of a throughput run at the defaults.")
		workerSamples := fs.intDefault("worker-latency-samples", 200, "`N`: --workers: jobs of a latency run, one at a time.")
		workerHeartbeat := fs.intDefault("worker-heartbeat-jobs", 200, "`N`: --workers: jobs held while heartbeat statements are counted (0 skips).")
		workerMemory := fs.intDefault("worker-memory-jobs", 100_000, "`N`: --workers: jobs of the memory run (0 skips).")
		durable := fs.boolean("durable", false, "Throwaway server: only the durable one (fsync on).")
		fast := fs.boolean("fast", false, "Throwaway server: only the fast one (fsync off).")
		return func(ctx context.Context, inv *invocation) (result, error) {
			if *workers {
				wo := bench.WorkerOptions{Systems: []bench.WorkerSystem{bench.RunledgerWorkers()}, Jobs: int(*workerJobs),
					DefaultJobs: int(*workerDefaultJobs), LatencySamples: int(*workerSamples), HeartbeatJobs: int(*workerHeartbeat),
					MemoryJobs: int(*workerMemory), Rounds: int(*rounds), AddedRTT: time.Millisecond, Progress: inv.stderr}
				if *workerJobs < 1 || *workerDefaultJobs < 1 || *workerSamples < 1 || *workerHeartbeat < 0 || *workerMemory < 0 || *rounds < 1 {
					return nil, invalidArgf("bench: --worker-jobs, --worker-default-jobs, --worker-latency-samples and --rounds must be positive, --worker-heartbeat-jobs and --worker-memory-jobs not negative")
				}
				if fs.isSet("added-rtt") {
					rtts, err := durationList("added-rtt", *rtt)
					if err != nil {
						return nil, err
					}
					wo.AddedRTT = 0
					if len(rtts) > 0 {
						wo.AddedRTT = rtts[0]
					}
				}
				if u, err := inv.URL(); err == nil {
					wo.DatabaseURL = u
				}
				rep, err := bench.RunWorkers(ctx, wo)
				if err != nil {
					return nil, err
				}
				return workerBenchResult{rep}, nil
			}
			opts := bench.Options{ComparePgbench: *compare, Pgbench: *pgbenchBin, Duration: *duration, Warmup: *warmup, Rounds: int(*rounds), CancelableContext: *cancelable}
			var err error
			if opts.Sources, err = intList("sources", *sources); err != nil {
				return nil, err
			}
			if opts.Clients, err = intList("clients", *clients); err != nil {
				return nil, err
			}
			if opts.AddedRTT, err = durationList("added-rtt", *rtt); err != nil {
				return nil, err
			}
			for _, p := range *paths {
				path, err := bench.ParsePath(p)
				if err != nil {
					return nil, invalidArgf("bench: --paths: %v", err)
				}
				opts.Paths = append(opts.Paths, path)
			}
			switch {
			case *durable && *fast:
				opts.Servers = []string{bench.ServerDurable, bench.ServerFast}
			case *durable:
				opts.Servers = []string{bench.ServerDurable}
			case *fast:
				opts.Servers = []string{bench.ServerFast}
			}
			if *duration < time.Second || *warmup < 0 || *rounds < 1 {
				return nil, invalidArgf("bench: --duration must be at least 1s, --warmup not negative and --rounds positive")
			}
			if u, err := inv.URL(); err == nil {
				opts.DatabaseURL = u
			}
			opts.Progress = inv.stderr
			opts.ProgressTTY = isTerminal(inv.stderr)
			rep, err := bench.Run(ctx, opts)
			if err != nil {
				return nil, err
			}
			return benchResult{rep}, nil
		}
	},
}

// benchResult prints the report (text) or marshals it (--json).
type benchResult struct{ *bench.Report }

func (r benchResult) text(w io.Writer) { r.Report.Text(w) }

// workerBenchResult prints the worker bench's report (text) or marshals
// it (--json).
type workerBenchResult struct{ *bench.WorkerReport }

func (r workerBenchResult) text(w io.Writer) { r.WorkerReport.Text(w) }

func intList(name, s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(strings.ReplaceAll(f, "_", "")); f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 {
			return nil, invalidArgf("bench: --%s: %q is not a positive integer", name, f)
		}
		out = append(out, n)
	}
	return out, nil
}

func durationList(name, s string) ([]time.Duration, error) {
	var out []time.Duration
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		if f == "0" {
			out = append(out, 0)
			continue
		}
		d, err := time.ParseDuration(f)
		if err != nil || d < 0 {
			return nil, invalidArgf("bench: --%s: %q is not a duration", name, f)
		}
		out = append(out, d)
	}
	return out, nil
}
