// Command river runs the replay bench beside River, on one throwaway
// durable PostgreSQL server in one run: replay.SucceededJob on the
// inserted and existing paths (the engine of the bench command in ..), and
// River's Client.Insert of one job and Client.JobRetry of a waiting job
// (River migrated with rivermigrate into the same database), with the same
// clients, warmup and duration, in rotating order; then the ratios
// replay/River. It lives in the bench module so that River never becomes a
// dependency of the library or of the runledger command; `make bench`
// runs it.
//
//	go run . [-clients 1,16] [-sources 10000] [-duration 5s] [-warmup 1s] [-rounds 1] [-json]
//
// With -workers it runs the worker bench instead (the code behind
// `go run .. -workers`): this project's worker runtime and River's
// Client with a queue and workers, on one throwaway durable server in one
// run, at their defaults (50 workers) and tuned (1,000 workers), with the
// server's cost per job of each throughput run (backend CPU, WAL bytes,
// index entries, heap and HOT updates: see bench.ServerCost), then the
// ratios runledger/River; `make bench-worker` runs it.
//
//	go run . -workers [-worker-jobs 50000] [-worker-default-jobs 5000] [-worker-latency-samples 200]
//	    [-worker-heartbeat-jobs 200] [-worker-memory-jobs 100000] [-added-rtt 1ms] [-rounds 1] [-json]
//
// -database-url (or DATABASE_URL) runs on that database instead of a
// throwaway server: it is migrated, the bench's rows replaced, and River's
// tables created and its jobs table emptied.
package main

import (
	"context"
	"encoding/json"
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
	os.Exit(run())
}

func run() int {
	fs := flag.NewFlagSet("river", flag.ContinueOnError)
	clients := fs.String("clients", "1,16", "concurrent clients, a comma-separated list")
	sources := fs.Int("sources", 10_000, "succeeded sources (and River jobs) to seed")
	duration := fs.Duration("duration", 5*time.Second, "measured time per run, whole seconds")
	warmup := fs.Duration("warmup", time.Second, "unmeasured load before each run")
	rounds := fs.Int("rounds", 1, "repeat each run, rotating the order of replay and River")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	dbURL := fs.String("database-url", os.Getenv("DATABASE_URL"), "database to run on instead of a throwaway durable server")
	requeueMode := fs.Bool("requeue", false, "run the requeue comparison instead: requeue.Job beside River's JobRetry of a discarded job, then requeue.Bulk")
	requeueOps := fs.Int("requeue-ops", 4000, "with -requeue: single operations of each kind")
	requeueBlocks := fs.Int("requeue-blocks", 8, "with -requeue: alternating blocks the single operations run in")
	bulkJobs := fs.Int("bulk-jobs", 100_000, "with -requeue: dead-lettered jobs requeue.Bulk requeues")
	bulkChunk := fs.Int("bulk-chunk", 1000, "with -requeue: jobs per bulk chunk")
	workers := fs.Bool("workers", false, "run the worker bench (runledger's worker runtime beside River's Client) instead")
	workerJobs := fs.Int("worker-jobs", 50_000, "-workers: jobs of a tuned throughput run")
	workerDefaultJobs := fs.Int("worker-default-jobs", 5_000, "-workers: jobs of a throughput run at the defaults")
	workerSamples := fs.Int("worker-latency-samples", 200, "-workers: jobs of a latency run, one at a time")
	workerHeartbeat := fs.Int("worker-heartbeat-jobs", 200, "-workers: jobs held while the statements are counted (0 skips)")
	workerMemory := fs.Int("worker-memory-jobs", 100_000, "-workers: jobs of the memory run (0 skips)")
	addedRTT := fs.Duration("added-rtt", time.Millisecond, "-workers: latency added per round trip for the proxied throughput runs (0 skips)")
	if err := fs.Parse(os.Args[1:]); err != nil {
		return 2
	}
	if *requeueMode {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
		defer stop()
		if err := runRequeueBench(ctx, *dbURL, *requeueOps, *requeueBlocks, *bulkJobs, *bulkChunk, *asJSON, os.Stderr); err != nil {
			fmt.Fprintf(os.Stderr, "river: %v\n", err)
			return 1
		}
		return 0
	}
	if *workers {
		if *workerJobs < 1 || *workerDefaultJobs < 1 || *workerSamples < 1 || *workerHeartbeat < 0 || *workerMemory < 0 || *addedRTT < 0 || *rounds < 1 {
			fmt.Fprintln(os.Stderr, "river: the -worker-* job counts must be positive (heartbeat and memory: not negative), -added-rtt not negative")
			return 2
		}
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
		defer stop()
		rep, err := bench.RunWorkers(ctx, bench.WorkerOptions{
			DatabaseURL: *dbURL,
			Systems:     []bench.WorkerSystem{bench.RunledgerWorkers(), riverWorkers{}},
			Jobs:        *workerJobs, DefaultJobs: *workerDefaultJobs, LatencySamples: *workerSamples,
			HeartbeatJobs: *workerHeartbeat, MemoryJobs: *workerMemory, AddedRTT: *addedRTT, Rounds: *rounds,
			Progress: os.Stderr,
		})
		if err != nil {
			fmt.Fprintf(os.Stderr, "river: %v\n", err)
			return 1
		}
		return report(rep, *asJSON, rep.Text)
	}
	opts := bench.Options{
		DatabaseURL: *dbURL,
		Servers:     []string{bench.ServerDurable},
		Sources:     []int{*sources},
		Paths:       []bench.Path{bench.Inserted, bench.Existing},
		Duration:    *duration,
		Warmup:      *warmup,
		Rounds:      *rounds,
		Anchors:     []bench.Anchor{newRiverAnchor()},
		Progress:    os.Stderr,
	}
	if st, err := os.Stderr.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
		opts.ProgressTTY = true
	}
	for _, s := range strings.Split(*clients, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil {
			fmt.Fprintf(os.Stderr, "river: -clients: %v\n", err)
			return 2
		}
		opts.Clients = append(opts.Clients, n)
	}
	if *duration < time.Second || *warmup < 0 || *rounds < 1 || *sources < 1 {
		fmt.Fprintln(os.Stderr, "river: -duration must be at least 1s, -warmup not negative, -rounds and -sources positive")
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	rep, err := bench.Run(ctx, opts)
	if err != nil {
		fmt.Fprintf(os.Stderr, "river: %v\n", err)
		return 1
	}
	return report(rep, *asJSON, rep.Text)
}

// report prints rep as JSON or as text.
func report(rep any, asJSON bool, text func(io.Writer)) int {
	if asJSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			fmt.Fprintf(os.Stderr, "river: %v\n", err)
			return 1
		}
		return 0
	}
	text(os.Stdout)
	return 0
}
