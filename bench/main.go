// Command bench measures runledger: the compare-and-replay engine
// (replay.SucceededJob on its four paths), optionally beside pgbench doing
// the same work, and with -workers the worker runtime. It is a module of
// its own, beside the library, so that the product links none of its
// tooling (the throwaway servers, the fault proxy, pgbench); the River
// comparison is its sibling package ./river. `make bench`, `make
// bench-worker` and `make bench-smoke` run them.
//
// The replay bench seeds a database with succeeded source jobs (each
// already replayed once, so the lineage table is as large), then for each
// number of clients and each path runs replay.SucceededJob in a loop for
// -duration after a -warmup, and prints throughput and p50/p95/p99 latency
// per path: inserted (a new key: a replay is created), existing (an
// idempotent retry), mismatch (a stale expected run) and not_found (a
// missing job), each one round trip. Loopback runs also report the
// server's cost per operation over the measured time: the CPU of the
// database's client backends, the WAL and its index entries.
//
// With -compare-pgbench it runs, right after each Go run and against the
// same database, the pgbench scripts doing the same work (internal/bench/
// scripts, embedded): the reference protocol, one statement per round
// trip; the three-round-trip pipeline; and this project's protocol (one
// pipelined round trip); then prints the ratios Go/pgbench. pgbench is
// looked for next to the PostgreSQL server binaries, then on PATH (or give
// -pgbench).
//
// -added-rtt adds a fixed latency to every round trip through a loopback
// TCP proxy; a list (0,1ms) runs each. A list of -sources (10000,1000000)
// seeds one database per size.
//
// Database: -database-url or DATABASE_URL (migrated; rows of the bench's
// job types and the helper functions runledger_bench_* are replaced by each
// run); without one, a throwaway local PostgreSQL server per durability:
// by default a durable one and a fast one (fsync, synchronous_commit and
// full_page_writes off); -durable or -fast picks one.
//
// With -workers it runs the worker bench for this project's worker alone
// (the same engine as `make bench-worker`, which runs it beside River's):
// throughput at the defaults and tuned, with the server's cost per job
// (backend CPU, WAL bytes, index entries and HOT updates), pickup latency,
// throughput with an added round-trip latency, heartbeat statements and
// memory.
//
// Exit codes: 0 done (also when some operations failed: see the errors
// column); 1 the database or pgbench could not be run; 2 bad flags.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"time"

	"github.com/runledger-go/runledger/bench/internal/bench"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// errUsage marks a bad flag value (exit code 2).
var errUsage = errors.New("usage")

func usagef(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{errUsage}, args...)...)
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	sources := fs.String("sources", "", "`N[,N...]`: succeeded sources to seed, one database per size (default 10000)")
	clients := fs.String("clients", "", "`N[,N...]`: concurrent clients (default 1,16)")
	duration := fs.Duration("duration", 5*time.Second, "measured time per run, whole seconds")
	warmup := fs.Duration("warmup", time.Second, "unmeasured load before each run")
	rounds := fs.Int("rounds", 1, "repeat each run N times, rotating the order, and report them together")
	rtt := fs.String("added-rtt", "", "`D[,D...]`: latency added to every round trip through a loopback proxy (default 0: direct; -workers: 1ms)")
	paths := fs.String("paths", "", "`P[,P...]`: paths to run: inserted, existing, mismatch, not_found (default all)")
	compare := fs.Bool("compare-pgbench", false, "also run the pgbench scripts (reference, three-round-trip and pipelined) and print the ratios")
	cancelable := fs.Bool("cancelable-context", false, "give every Go call a cancelable context, as a request handler would")
	pgbenchBin := fs.String("pgbench", "", "`PATH`: the pgbench binary")
	workers := fs.Bool("workers", false, "run the worker bench (throughput and server cost per job, pickup latency, heartbeat overhead, memory) instead")
	workerJobs := fs.Int("worker-jobs", 50_000, "-workers: jobs of a tuned throughput run")
	workerDefaultJobs := fs.Int("worker-default-jobs", 5_000, "-workers: jobs of a throughput run at the defaults")
	workerSamples := fs.Int("worker-latency-samples", 200, "-workers: jobs of a latency run, one at a time")
	workerHeartbeat := fs.Int("worker-heartbeat-jobs", 200, "-workers: jobs held while heartbeat statements are counted (0 skips)")
	workerMemory := fs.Int("worker-memory-jobs", 100_000, "-workers: jobs of the memory run (0 skips)")
	durable := fs.Bool("durable", false, "throwaway server: only the durable one (fsync on)")
	fast := fs.Bool("fast", false, "throwaway server: only the fast one (fsync off)")
	dbURL := fs.String("database-url", os.Getenv("DATABASE_URL"), "database to run on instead of throwaway servers")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	rep, text, err := runBench(ctx, fs, benchFlags{
		sources: *sources, clients: *clients, duration: *duration, warmup: *warmup, rounds: *rounds, rtt: *rtt,
		paths: *paths, compare: *compare, cancelable: *cancelable, pgbench: *pgbenchBin, workers: *workers,
		workerJobs: *workerJobs, workerDefaultJobs: *workerDefaultJobs, workerSamples: *workerSamples,
		workerHeartbeat: *workerHeartbeat, workerMemory: *workerMemory, durable: *durable, fast: *fast, dbURL: *dbURL,
	}, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "bench: %v\n", err)
		if errors.Is(err, errUsage) {
			return 2
		}
		return 1
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			fmt.Fprintf(stderr, "bench: %v\n", err)
			return 1
		}
		return 0
	}
	text(stdout)
	return 0
}

type benchFlags struct {
	sources, clients, rtt, paths, pgbench, dbURL                                        string
	duration, warmup                                                                    time.Duration
	rounds, workerJobs, workerDefaultJobs, workerSamples, workerHeartbeat, workerMemory int
	compare, cancelable, workers, durable, fast                                         bool
}

// runBench runs the bench the flags choose and returns its report and the
// report's text printer.
func runBench(ctx context.Context, fs *flag.FlagSet, f benchFlags, progress io.Writer) (any, func(io.Writer), error) {
	set := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	if f.workers {
		if f.workerJobs < 1 || f.workerDefaultJobs < 1 || f.workerSamples < 1 || f.workerHeartbeat < 0 || f.workerMemory < 0 || f.rounds < 1 {
			return nil, nil, usagef("-worker-jobs, -worker-default-jobs, -worker-latency-samples and -rounds must be positive, -worker-heartbeat-jobs and -worker-memory-jobs not negative")
		}
		wo := bench.WorkerOptions{DatabaseURL: f.dbURL, Systems: []bench.WorkerSystem{bench.RunledgerWorkers()}, Jobs: f.workerJobs,
			DefaultJobs: f.workerDefaultJobs, LatencySamples: f.workerSamples, HeartbeatJobs: f.workerHeartbeat,
			MemoryJobs: f.workerMemory, Rounds: f.rounds, AddedRTT: time.Millisecond, Progress: progress}
		if set["added-rtt"] {
			rtts, err := durationList("added-rtt", f.rtt)
			if err != nil {
				return nil, nil, err
			}
			wo.AddedRTT = 0
			if len(rtts) > 0 {
				wo.AddedRTT = rtts[0]
			}
		}
		rep, err := bench.RunWorkers(ctx, wo)
		if err != nil {
			return nil, nil, err
		}
		return rep, rep.Text, nil
	}
	opts := bench.Options{DatabaseURL: f.dbURL, ComparePgbench: f.compare, Pgbench: f.pgbench, Duration: f.duration,
		Warmup: f.warmup, Rounds: f.rounds, CancelableContext: f.cancelable, Progress: progress}
	var err error
	if opts.Sources, err = intList("sources", f.sources); err != nil {
		return nil, nil, err
	}
	if opts.Clients, err = intList("clients", f.clients); err != nil {
		return nil, nil, err
	}
	if opts.AddedRTT, err = durationList("added-rtt", f.rtt); err != nil {
		return nil, nil, err
	}
	for _, p := range strings.Split(f.paths, ",") {
		if p = strings.TrimSpace(p); p == "" {
			continue
		}
		path, err := bench.ParsePath(p)
		if err != nil {
			return nil, nil, usagef("-paths: %v", err)
		}
		opts.Paths = append(opts.Paths, path)
	}
	switch {
	case f.durable && f.fast:
		opts.Servers = []string{bench.ServerDurable, bench.ServerFast}
	case f.durable:
		opts.Servers = []string{bench.ServerDurable}
	case f.fast:
		opts.Servers = []string{bench.ServerFast}
	}
	if f.duration < time.Second || f.warmup < 0 || f.rounds < 1 {
		return nil, nil, usagef("-duration must be at least 1s, -warmup not negative and -rounds positive")
	}
	if st, ok := progress.(*os.File); ok {
		if fi, err := st.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
			opts.ProgressTTY = true
		}
	}
	rep, err := bench.Run(ctx, opts)
	if err != nil {
		return nil, nil, err
	}
	return rep, rep.Text, nil
}

func intList(name, s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(strings.ReplaceAll(f, "_", "")); f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 {
			return nil, usagef("-%s: %q is not a positive integer", name, f)
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
			return nil, usagef("-%s: %q is not a duration", name, f)
		}
		out = append(out, d)
	}
	return out, nil
}
