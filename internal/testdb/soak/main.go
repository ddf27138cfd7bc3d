// Command soak runs the ledger under a long, mixed load and shows that
// nothing leaks: client memory and server connections stay flat, errors are
// transient and happen only around a server restart, and the ledger's
// invariants hold at the end.
//
// It starts a durable throwaway server (package pgserver with Durable set:
// PostgreSQL's default fsync, synchronous_commit and full_page_writes),
// migrates it, and runs -clients concurrent clients (16 by default) for
// -duration (10 minutes by default, or SOAK_DURATION) through the public API
// of packages jobs and replay: definition upserts, keyed and unkeyed
// enqueues, claims, completions, failures (retried and dead-lettered), reads,
// lease recovery, replays of succeeded jobs and idempotent retries of
// earlier enqueue keys and replay keys. Beside them the worker runtime
// (package worker) runs jobs that a producer enqueues at -worker-rate per
// second (runtime.go says what their handlers do): -workers workers (3),
// each with its own worker id and pool, -worker-concurrency handlers (8),
// a -worker-lease of 2 s and recovery every -worker-recovery (1 s), in this
// process; they drain the jobs once the load ends. Halfway through it
// restarts the server once (-restart-mode, immediate by default: crash
// recovery from the WAL), down for -restart-down between its stop and its
// start (0 by default; longer than the workers' lease, a slow restart,
// during which their leases run out while their last writes' replies are
// lost). Every 10 seconds (-sample) it records the
// process's resident set size (VmRSS from /proc/self/status) and Go heap,
// goroutines, the server's open connections (pg_stat_activity) and the
// queue. Every 250 ms (-lease-sample) it reads the leases each worker
// holds (never above its Concurrency away from the restart: a worker
// frees a handler's slot only once its outcome is committed), the
// database's deadlock counter (pg_stat_database.deadlocks) and the
// process's HeapAlloc, Sys and goroutines, keeping their extremes. At the
// end it checks the ledger in SQL against what the clients and the workers
// were told, counts duplicate attempts (an attempt whose side effect was
// recorded twice, or an attempt after one that never ended in a failure:
// no RETRY_SCHEDULED event, so not failed, timed out or recovered) near
// the restart and away from it, and prints a report.
//
// A client retries an operation that failed with a transient error or an
// unconfirmed commit with the same request, as the library documents; any
// other error is a failure. Acknowledgements (every job id and replay a
// client was told about) go to a temp file, not to memory, so that the
// bookkeeping does not grow the heap the soak measures.
//
// Exit status: 0 when every check passed; 1 when an invariant failed, a
// client met an error other than a transient one or an unconfirmed commit,
// a retryable error happened away from the restart, a worker logged a
// warning away from it (its handlers' panics aside), the jobs did not
// drain, the deadlock counter rose at all, a worker held more leases than
// its Concurrency away from the restart, or a duplicate attempt happened
// away from it; 2 when the soak could not run (bad flags, no server
// binaries).
//
// It is a program rather than a test so that go test ./... never runs it
// (it takes minutes) and it is never silently skipped when asked for:
//
//	make soak                        # 10 minutes
//	make soak SOAK_DURATION=1m
//	make soak SOAK_DURATION=20s SOAK_FLAGS='-sample 2s -window 20s'   # a CI-sized run
//	go run ./internal/testdb/soak -duration 1m -restart-mode fast
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

// config is the soak's command line.
type config struct {
	duration    time.Duration
	clients     int
	sample      time.Duration
	restartAt   float64
	restartMode string
	window      time.Duration
	lease       time.Duration
	verbose     bool

	workers           int
	workerConcurrency int
	workerRate        int
	workerLease       time.Duration
	restartDown       time.Duration
	workerRecovery    time.Duration
	leaseSample       time.Duration
}

func main() {
	cfg, err := parseFlags(os.Args[1:])
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "soak:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, cfg))
}

func parseFlags(args []string) (config, error) {
	def := 10 * time.Minute
	if v := os.Getenv("SOAK_DURATION"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			return config{}, fmt.Errorf("SOAK_DURATION=%q: %w", v, err)
		}
		def = d
	}
	var cfg config
	fs := flag.NewFlagSet("soak", flag.ContinueOnError)
	fs.DurationVar(&cfg.duration, "duration", def, "how long the clients run (default from SOAK_DURATION, else 10m)")
	fs.IntVar(&cfg.clients, "clients", 16, "concurrent clients, each on its own connection of one shared pool")
	fs.DurationVar(&cfg.sample, "sample", 10*time.Second, "interval between memory and connection samples")
	fs.Float64Var(&cfg.restartAt, "restart-at", 0.5, "when to restart the server, as a fraction of -duration")
	fs.StringVar(&cfg.restartMode, "restart-mode", "immediate", `"immediate" (SIGQUIT, crash recovery) or "fast" (SIGINT, checkpoint)`)
	fs.DurationVar(&cfg.restartDown, "restart-down", 0, "how long the server stays down at the restart, between its stop and its start (a slow restart: leases run out meanwhile)")
	fs.DurationVar(&cfg.window, "window", 30*time.Second, "how long after the restart's end a retryable error still counts as caused by it")
	fs.DurationVar(&cfg.lease, "lease", 30*time.Second, "lease of claimed jobs")
	fs.IntVar(&cfg.workers, "workers", 3, "worker.Worker instances (package worker), each with its own worker id and pool")
	fs.IntVar(&cfg.workerConcurrency, "worker-concurrency", 8, "handlers of each worker (its Concurrency)")
	fs.IntVar(&cfg.workerRate, "worker-rate", 100, "worker jobs enqueued per second")
	fs.DurationVar(&cfg.workerLease, "worker-lease", 2*time.Second, "the workers' lease (heartbeats every third of it)")
	fs.DurationVar(&cfg.workerRecovery, "worker-recovery", time.Second, "how often each worker recovers expired leases")
	fs.DurationVar(&cfg.leaseSample, "lease-sample", 250*time.Millisecond, "interval between readings of the workers' leases, the deadlock counter, heap and goroutines")
	fs.BoolVar(&cfg.verbose, "v", false, "log the server's start and restart to stderr")
	if err := fs.Parse(args); err != nil {
		return config{}, err
	}
	switch {
	case fs.NArg() > 0:
		return config{}, fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	case cfg.duration <= 0:
		return config{}, errors.New("-duration must be positive")
	case cfg.clients < 1:
		return config{}, errors.New("-clients must be at least 1")
	case cfg.sample <= 0:
		return config{}, errors.New("-sample must be positive")
	case cfg.restartAt <= 0 || cfg.restartAt >= 1:
		return config{}, errors.New("-restart-at must be between 0 and 1 (exclusive)")
	case cfg.restartMode != "immediate" && cfg.restartMode != "fast":
		return config{}, fmt.Errorf("-restart-mode %q: want immediate or fast", cfg.restartMode)
	case cfg.lease <= 0:
		return config{}, errors.New("-lease must be positive")
	case cfg.workers < 1 || cfg.workers > 8:
		return config{}, errors.New("-workers must be between 1 and 8")
	case cfg.workerConcurrency < 1:
		return config{}, errors.New("-worker-concurrency must be at least 1")
	case cfg.workerRecovery <= 0:
		return config{}, errors.New("-worker-recovery must be positive")
	case cfg.leaseSample <= 0:
		return config{}, errors.New("-lease-sample must be positive")
	case cfg.workers*workerPoolSize(cfg)+cfg.clients+producerInFlight+4 > 95:
		return config{}, errors.New("-workers, -worker-concurrency and -clients ask for more connections than the server's 100")
	case cfg.workerRate < 1 || cfg.workerRate > 10000:
		return config{}, errors.New("-worker-rate must be between 1 and 10000")
	case cfg.workerLease < 3*time.Millisecond:
		return config{}, errors.New("-worker-lease must be at least 3ms")
	}
	return cfg, nil
}
