package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runledger-go/runledger/internal/pgserver"
	"github.com/runledger-go/runledger/internal/testdb/pgproxy"
)

// The worker bench (`go run . -workers` in the bench module, and beside River in the
// nested module): one system's worker runs trivial jobs, and the bench
// measures
//
//   - throughput: Jobs trivial jobs inserted beforehand in one batch, then
//     a worker started; jobs completed (committed) per second, from the
//     start to the last completion;
//   - pickup latency at a light load: one job at a time, enqueued and
//     committed, its handler's start timed from the enqueue's return (the
//     commit as the client sees it); p50 and p95 (then a short pause for
//     its completion before the next);
//   - the same throughput with a latency added to every round trip
//     (package pgproxy's Delay) and through the proxy without one (the
//     baseline);
//   - statements per job per heartbeat interval, counted on the wire
//     (CommandComplete messages through the proxy) while every handler of
//     a worker holds its job;
//   - the memory of one worker running MemoryJobs jobs: RSS, heap in use
//     and goroutines before and after.
//
// Each system runs in each configuration (WorkerDefaults, WorkerTuned)
// with the same jobs and the same worker count, in rotating order.

// Worker configurations: every system maps them to its own settings (the
// same number of workers in both systems).
const (
	WorkerDefaults = "defaults" // 50 workers, everything else at the system's defaults
	WorkerTuned    = "tuned"    // 1,000 workers, tuned for speed
	// WorkerHeartbeat is the tuned configuration with leases short
	// enough for heartbeats to show within seconds (where the system has
	// them) and nothing else in the background that sends statements.
	WorkerHeartbeat = "heartbeat"
)

// Worker measures.
const (
	MeasureThroughput = "throughput"
	MeasureLatency    = "latency"
	MeasureHeartbeat  = "heartbeat"
	MeasureMemory     = "memory"
)

// WorkerSystem is a job system whose worker the worker bench runs. One
// that brings dependencies of its own (River) lives in a module of its
// own and passes itself to RunWorkers.
type WorkerSystem interface {
	// Name labels the system's results.
	Name() string
	// Prepare readies the database: the system's schema. It runs once.
	Prepare(ctx context.Context, dbURL string) error
	// Reset removes every job the system holds (between runs).
	Reset(ctx context.Context, dbURL string) error
	// Insert inserts n trivial jobs, due now, through pool (the system's
	// own way of inserting many jobs).
	Insert(ctx context.Context, pool *pgxpool.Pool, n int) error
	// Describe says what config means for the system (the settings).
	Describe(config string) string
	// Start starts a worker in config on pool whose handler calls
	// h.Started with the job's number, then waits for h.Hold to close
	// when it is not nil, and returns success; h.Completed is called once
	// per completion, after its commit.
	Start(ctx context.Context, pool *pgxpool.Pool, config string, h WorkerHooks) (WorkerRun, error)
}

// WorkerHooks are what a handler and a worker report to the bench.
type WorkerHooks struct {
	Started   func(n int64)
	Completed func()
	Hold      <-chan struct{}
	// Workers, when not 0, overrides the configuration's worker count.
	Workers int
}

// WorkerRun is a running worker.
type WorkerRun interface {
	// Enqueue enqueues one trivial job numbered n and returns once it is
	// committed.
	Enqueue(ctx context.Context, n int64) error
	// HeartbeatInterval is how often the worker renews its leases (0:
	// the system has no heartbeat).
	HeartbeatInterval() time.Duration
	// Stop stops the worker and waits for it.
	Stop() error
}

// WorkerOptions configures RunWorkers.
type WorkerOptions struct {
	// DatabaseURL is the database to run on (migrated; its jobs removed
	// between runs); empty: a throwaway durable server.
	DatabaseURL string
	// Systems are the systems to run, in order (rotated by round).
	Systems []WorkerSystem
	// Configs lists the configurations (default both).
	Configs []string
	// Jobs is the throughput run's jobs in the tuned configuration;
	// DefaultJobs in the defaults configuration (slower: fewer jobs).
	Jobs, DefaultJobs int
	// LatencySamples is the light-load run's jobs.
	LatencySamples int
	// AddedRTT is the latency added per round trip for the proxied
	// throughput runs (tuned configuration); 0 skips them.
	AddedRTT time.Duration
	// HeartbeatJobs is how many jobs are held for the heartbeat count
	// (0 skips it); MemoryJobs how many jobs the memory run works (0
	// skips it).
	HeartbeatJobs, MemoryJobs int
	// Rounds repeats the throughput and latency runs, rotating the order
	// of the systems (default 1).
	Rounds int
	// PoolSize is each worker's pool (default 20).
	PoolSize int32
	// Progress receives setup and progress lines; nil discards them.
	Progress io.Writer
}

// WorkerResult is one system's figure for one measure and configuration.
type WorkerResult struct {
	System  string `json:"system"`
	Config  string `json:"config"`
	Measure string `json:"measure"`
	// AddedRTT is the latency added per round trip ("" direct; "0s"
	// through the proxy without delay, the baseline).
	AddedRTT string  `json:"added_rtt,omitempty"`
	Jobs     int     `json:"jobs"`
	Seconds  float64 `json:"seconds,omitempty"`
	// PerSecond is jobs completed per second (throughput).
	PerSecond float64 `json:"per_second,omitempty"`
	// P50, P95 and P99 are pickup latencies in milliseconds (latency).
	P50 float64 `json:"p50_ms,omitempty"`
	P95 float64 `json:"p95_ms,omitempty"`
	P99 float64 `json:"p99_ms,omitempty"`
	// Statements is the statements counted in the heartbeat window,
	// Intervals the heartbeat intervals it spans, PerJobPerInterval
	// Statements / (Jobs x Intervals).
	Statements        int64   `json:"statements,omitempty"`
	Intervals         float64 `json:"intervals,omitempty"`
	PerJobPerInterval float64 `json:"per_job_per_interval,omitempty"`
	// Memory: before the worker started and after it ran the jobs (after
	// a GC).
	RSSStartMB    float64 `json:"rss_start_mb,omitempty"`
	RSSEndMB      float64 `json:"rss_end_mb,omitempty"`
	HeapStartMB   float64 `json:"heap_start_mb,omitempty"`
	HeapEndMB     float64 `json:"heap_end_mb,omitempty"`
	GoroutinesEnd int     `json:"goroutines_end,omitempty"`
	GoroutinesPre int     `json:"goroutines_start,omitempty"`
	Note          string  `json:"note,omitempty"`
	// Cost is the server's cost per job of a direct throughput run: the
	// insert of the jobs, their claims and their completions.
	Cost *ServerCost `json:"server_cost,omitempty"`
}

// WorkerReport is the outcome of RunWorkers.
type WorkerReport struct {
	Machine  Machine           `json:"machine"`
	Settings map[string]string `json:"settings"`
	Results  []WorkerResult    `json:"results"`
}

// RunWorkers runs the worker bench.
func RunWorkers(ctx context.Context, o WorkerOptions) (*WorkerReport, error) {
	if len(o.Systems) == 0 {
		return nil, errors.New("bench: no worker system")
	}
	if len(o.Configs) == 0 {
		o.Configs = []string{WorkerDefaults, WorkerTuned}
	}
	for _, c := range o.Configs {
		if c != WorkerDefaults && c != WorkerTuned {
			return nil, fmt.Errorf("bench: unknown worker configuration %q", c)
		}
	}
	o.Jobs = cmpOr(o.Jobs, 50_000)
	o.DefaultJobs = cmpOr(o.DefaultJobs, 5_000)
	o.LatencySamples = cmpOr(o.LatencySamples, 200)
	o.Rounds = cmpOr(o.Rounds, 1)
	o.PoolSize = cmpOr(o.PoolSize, 20)
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	rep := &WorkerReport{Machine: Machine{CPU: cpuModel(), Cores: runtime.NumCPU(), GoVersion: runtime.Version()},
		Settings: map[string]string{}}
	for _, s := range o.Systems {
		for _, c := range o.Configs {
			rep.Settings[s.Name()+" "+c] = s.Describe(c)
		}
		if o.HeartbeatJobs > 0 {
			rep.Settings[s.Name()+" "+WorkerHeartbeat] = s.Describe(WorkerHeartbeat)
		}
	}
	rep.Settings["jobs"] = fmt.Sprintf("%d tuned, %d defaults; latency %d samples; rounds %d; pool %d connections",
		o.Jobs, o.DefaultJobs, o.LatencySamples, o.Rounds, o.PoolSize)
	wb := &workerBench{o: o, rep: rep}
	url := o.DatabaseURL
	if url == "" {
		binDir, err := pgserver.FindBinDir("")
		if err != nil {
			return rep, err
		}
		wb.logf("starting a throwaway durable PostgreSQL server")
		srv, err := pgserver.Start(ctx, pgserver.Options{BinDir: binDir, Durable: true, Settings: serverSettings})
		if err != nil {
			return rep, err
		}
		defer func() { _ = srv.Stop() }()
		if err := createDatabase(ctx, srv.URL("postgres"), "runledger_worker_bench"); err != nil {
			return rep, err
		}
		url = srv.URL("runledger_worker_bench")
		rep.Settings["server"] = ServerDurable
	} else {
		rep.Settings["server"] = ServerConfigured
	}
	rep.Machine.PostgreSQL = serverVersion(ctx, url)
	for _, s := range o.Systems {
		if err := s.Prepare(ctx, url); err != nil {
			return rep, fmt.Errorf("bench: prepare %s: %w", s.Name(), err)
		}
	}
	if err := wb.all(ctx, url); err != nil {
		return rep, err
	}
	return rep, nil
}

type workerBench struct {
	o   WorkerOptions
	rep *WorkerReport
}

func (wb *workerBench) logf(format string, args ...any) {
	fmt.Fprintf(wb.o.Progress, "bench: "+format+"\n", args...)
}

// rotated returns the systems in round r's order.
func (wb *workerBench) rotated(r int) []WorkerSystem {
	n := len(wb.o.Systems)
	out := make([]WorkerSystem, n)
	for i := range out {
		out[i] = wb.o.Systems[(i+r)%n]
	}
	return out
}

func (wb *workerBench) all(ctx context.Context, url string) error {
	type key struct{ system, config, measure, rtt string }
	sums := map[key]*WorkerResult{}
	lats := map[key][]time.Duration{}
	costs := map[key]*costTotals{}
	var order []key
	addCost := func(k key, c *costTotals) {
		if c == nil {
			return
		}
		if costs[k] == nil {
			costs[k] = &costTotals{}
		}
		costs[k].add(*c)
	}
	add := func(k key, res WorkerResult, lat []time.Duration) {
		if sums[k] == nil {
			r := res
			sums[k] = &r
			order = append(order, k)
		} else {
			s := sums[k]
			s.Jobs += res.Jobs
			s.Seconds += res.Seconds
		}
		lats[k] = append(lats[k], lat...)
	}
	var proxy, baseline *pgproxy.Proxy
	if wb.o.AddedRTT > 0 {
		addr, err := pgproxy.TargetAddr(url)
		if err != nil {
			return err
		}
		if proxy, err = pgproxy.Start(addr, pgproxy.Options{Delay: wb.o.AddedRTT}); err != nil {
			return err
		}
		defer proxy.Close()
		if baseline, err = pgproxy.Start(addr, pgproxy.Options{}); err != nil {
			return err
		}
		defer baseline.Close()
	}
	for r := 0; r < wb.o.Rounds; r++ {
		for _, config := range wb.o.Configs {
			jobs := wb.o.Jobs
			if config == WorkerDefaults {
				jobs = wb.o.DefaultJobs
			}
			for _, s := range wb.rotated(r) {
				res, cost, err := wb.throughput(ctx, s, url, config, jobs, true)
				if err != nil {
					return err
				}
				add(key{s.Name(), config, MeasureThroughput, ""}, res, nil)
				addCost(key{s.Name(), config, MeasureThroughput, ""}, cost)
			}
			for _, s := range wb.rotated(r) {
				res, lat, err := wb.latency(ctx, s, url, config)
				if err != nil {
					return err
				}
				add(key{s.Name(), config, MeasureLatency, ""}, res, lat)
			}
		}
		if proxy != nil {
			for _, s := range wb.rotated(r) {
				for _, p := range []struct {
					proxy *pgproxy.Proxy
					rtt   time.Duration
				}{{baseline, 0}, {proxy, wb.o.AddedRTT}} {
					res, _, err := wb.throughput(ctx, s, p.proxy.ConnString(url), WorkerTuned, wb.o.Jobs, false)
					if err != nil {
						return err
					}
					res.AddedRTT = p.rtt.String()
					add(key{s.Name(), WorkerTuned, MeasureThroughput, p.rtt.String()}, res, nil)
				}
			}
		}
	}
	for _, k := range order {
		res := *sums[k]
		if res.Seconds > 0 && k.measure == MeasureThroughput {
			res.PerSecond = float64(res.Jobs) / res.Seconds
		}
		if l := lats[k]; len(l) > 0 {
			res.P50, res.P95, res.P99 = percentiles(l)
		}
		if c := costs[k]; c != nil {
			res.Cost = c.perJob()
		}
		wb.rep.Results = append(wb.rep.Results, res)
	}
	if wb.o.HeartbeatJobs > 0 {
		for _, s := range wb.o.Systems {
			res, err := wb.heartbeat(ctx, s, url)
			if err != nil {
				return err
			}
			wb.rep.Results = append(wb.rep.Results, res)
		}
	}
	if wb.o.MemoryJobs > 0 {
		// The first system's worker only (this project's): the figures are
		// the process's, which the other systems' runs would blur.
		res, err := wb.memory(ctx, wb.o.Systems[0], url)
		if err != nil {
			return err
		}
		wb.rep.Results = append(wb.rep.Results, res)
	}
	return nil
}

// pool opens a pool of PoolSize connections; meter, when not nil,
// measures its backends.
func (wb *workerBench) pool(ctx context.Context, url string, meter *costMeter) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = wb.o.PoolSize
	if meter != nil {
		meter.hook(cfg)
	}
	return pgxpool.NewWithConfig(ctx, cfg)
}

// insert inserts n jobs of s through a pool of its own.
func (wb *workerBench) insert(ctx context.Context, s WorkerSystem, url string, n int, meter *costMeter) error {
	pool, err := wb.pool(ctx, url, meter)
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := s.Insert(ctx, pool, n); err != nil {
		return fmt.Errorf("bench: %s insert: %w", s.Name(), err)
	}
	return nil
}

// fresh resets the system's jobs and settles the server (VACUUM, a
// checkpoint), so that every run starts alike.
func (wb *workerBench) fresh(ctx context.Context, s WorkerSystem, url string) error {
	if err := s.Reset(ctx, url); err != nil {
		return fmt.Errorf("bench: reset %s: %w", s.Name(), err)
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	for _, stmt := range []string{"VACUUM ANALYZE", "CHECKPOINT"} {
		if _, err := conn.Exec(ctx, stmt); err != nil {
			return fmt.Errorf("bench: %s: %w", stmt, err)
		}
	}
	return nil
}

// throughput inserts jobs trivial jobs, starts a worker and times it until
// every job's completion is committed. With cost it also measures what the
// insert and the worker cost the server, until the last completion.
func (wb *workerBench) throughput(ctx context.Context, s WorkerSystem, url, config string, jobs int, cost bool) (WorkerResult, *costTotals, error) {
	res := WorkerResult{System: s.Name(), Config: config, Measure: MeasureThroughput, Jobs: jobs}
	if err := wb.fresh(ctx, s, url); err != nil {
		return res, nil, err
	}
	// Two meters, one per phase: the insert, then the claims and
	// completions.
	var insertMeter, meter *costMeter
	var insertCost costTotals
	if cost {
		var err error
		if insertMeter, err = startCost(ctx, url); err != nil {
			return res, nil, fmt.Errorf("bench: server cost: %w", err)
		}
		defer insertMeter.close()
	}
	if err := wb.insert(ctx, s, url, jobs, insertMeter); err != nil {
		return res, nil, err
	}
	if cost {
		insertCost = insertMeter.stop(ctx, jobs)
		var err error
		if meter, err = startCost(ctx, url); err != nil {
			return res, nil, fmt.Errorf("bench: server cost: %w", err)
		}
		defer meter.close()
	}
	pool, err := wb.pool(ctx, url, meter)
	if err != nil {
		return res, nil, err
	}
	defer pool.Close()
	var done atomic.Int64
	all := make(chan struct{})
	start := time.Now()
	run, err := s.Start(ctx, pool, config, WorkerHooks{Started: func(int64) {}, Completed: func() {
		if done.Add(1) == int64(jobs) {
			close(all)
		}
	}})
	if err != nil {
		return res, nil, fmt.Errorf("bench: %s start: %w", s.Name(), err)
	}
	timeout := time.NewTimer(time.Duration(jobs)*10*time.Millisecond + time.Minute)
	defer timeout.Stop()
	select {
	case <-all:
	case <-timeout.C:
		_ = run.Stop()
		return res, nil, fmt.Errorf("bench: %s %s: %d of %d jobs completed before the timeout", s.Name(), config, done.Load(), jobs)
	case <-ctx.Done():
		_ = run.Stop()
		return res, nil, ctx.Err()
	}
	res.Seconds = time.Since(start).Seconds()
	var totals *costTotals
	var costNote string
	if meter != nil {
		work := meter.stop(ctx, jobs)
		t := insertCost.then(work)
		totals = &t
		if c := t.perJob(); c != nil {
			costNote = "; per job on the server: " + c.summary()
		}
	}
	if err := run.Stop(); err != nil {
		return res, nil, err
	}
	wb.logf("%s %s throughput: %d jobs in %.2fs, %.0f jobs/s%s", s.Name(), config, jobs, res.Seconds, float64(jobs)/res.Seconds, costNote)
	return res, totals, nil
}

// latency starts a worker on an empty queue and enqueues one job at a
// time, timing each handler's start from its enqueue's commit.
func (wb *workerBench) latency(ctx context.Context, s WorkerSystem, url, config string) (WorkerResult, []time.Duration, error) {
	res := WorkerResult{System: s.Name(), Config: config, Measure: MeasureLatency, Jobs: wb.o.LatencySamples}
	if err := wb.fresh(ctx, s, url); err != nil {
		return res, nil, err
	}
	pool, err := wb.pool(ctx, url, nil)
	if err != nil {
		return res, nil, err
	}
	defer pool.Close()
	started := make(chan time.Time, 1)
	var completed atomic.Int64
	run, err := s.Start(ctx, pool, config, WorkerHooks{
		Started:   func(int64) { started <- time.Now() },
		Completed: func() { completed.Add(1) },
	})
	if err != nil {
		return res, nil, fmt.Errorf("bench: %s start: %w", s.Name(), err)
	}
	defer func() { _ = run.Stop() }()
	// Let the worker settle (its first poll, LISTEN).
	time.Sleep(500 * time.Millisecond)
	lat := make([]time.Duration, 0, wb.o.LatencySamples)
	t0 := time.Now()
	for i := 1; i <= wb.o.LatencySamples; i++ {
		if err := run.Enqueue(ctx, int64(i)); err != nil {
			return res, nil, fmt.Errorf("bench: %s enqueue: %w", s.Name(), err)
		}
		committed := time.Now()
		select {
		case at := <-started:
			lat = append(lat, max(at.Sub(committed), 0))
		case <-time.After(30 * time.Second):
			return res, nil, fmt.Errorf("bench: %s %s: job %d did not start within 30s", s.Name(), config, i)
		}
		// One job at a time: wait for its completion (up to 1 s), then
		// a short pause.
		for deadline := time.Now().Add(time.Second); completed.Load() < int64(i) && time.Now().Before(deadline); {
			time.Sleep(time.Millisecond)
		}
		time.Sleep(5 * time.Millisecond)
	}
	res.Seconds = time.Since(t0).Seconds()
	p50, p95, _ := percentiles(lat)
	wb.logf("%s %s latency: %d jobs, p50 %.2f ms, p95 %.2f ms", s.Name(), config, len(lat), p50, p95)
	return res, lat, nil
}

// heartbeat holds HeartbeatJobs jobs in a worker (tuned, as many workers
// as jobs) and counts the statements its pool sends while they are held,
// over about four heartbeat intervals.
func (wb *workerBench) heartbeat(ctx context.Context, s WorkerSystem, url string) (WorkerResult, error) {
	n := wb.o.HeartbeatJobs
	res := WorkerResult{System: s.Name(), Config: WorkerHeartbeat, Measure: MeasureHeartbeat, Jobs: n}
	if err := wb.fresh(ctx, s, url); err != nil {
		return res, err
	}
	if err := wb.insert(ctx, s, url, n, nil); err != nil {
		return res, err
	}
	addr, err := pgproxy.TargetAddr(url)
	if err != nil {
		return res, err
	}
	var statements atomic.Int64
	proxy, err := pgproxy.Start(addr, pgproxy.Options{Observe: func(m pgproxy.Message) {
		if m.Type == 'C' {
			statements.Add(1)
		}
	}})
	if err != nil {
		return res, err
	}
	defer proxy.Close()
	pool, err := wb.pool(ctx, proxy.ConnString(url), nil)
	if err != nil {
		return res, err
	}
	defer pool.Close()
	hold := make(chan struct{})
	var running atomic.Int64
	allRunning := make(chan struct{})
	// As many workers as jobs: once all run, the worker claims nothing
	// more, and what it sends is its heartbeats.
	run, err := s.Start(ctx, pool, WorkerHeartbeat, WorkerHooks{Hold: hold, Workers: n, Completed: func() {}, Started: func(int64) {
		if running.Add(1) == int64(n) {
			close(allRunning)
		}
	}})
	if err != nil {
		return res, err
	}
	defer func() { _ = run.Stop() }()
	select {
	case <-allRunning:
	case <-time.After(time.Minute):
		close(hold)
		return res, fmt.Errorf("bench: %s heartbeat: %d of %d jobs started", s.Name(), running.Load(), n)
	}
	time.Sleep(200 * time.Millisecond) // the claims' aftermath
	interval := run.HeartbeatInterval()
	window := 4 * interval
	if interval == 0 {
		window = 4 * time.Second
		res.Note = "no heartbeat: the statements a worker holding the jobs sends anyway"
	}
	statements.Store(0)
	t0 := time.Now()
	time.Sleep(window)
	res.Statements = statements.Load()
	res.Seconds = time.Since(t0).Seconds()
	close(hold)
	if interval > 0 {
		res.Intervals = res.Seconds / interval.Seconds()
		res.PerJobPerInterval = float64(res.Statements) / (float64(n) * res.Intervals)
	}
	wb.logf("%s heartbeat: %d jobs held %.2fs, %d statements", s.Name(), n, res.Seconds, res.Statements)
	return res, nil
}

// memory starts a worker (tuned) on an empty queue, samples the process,
// inserts MemoryJobs jobs in one batch, waits for them, and samples again
// (after a GC, the worker still running).
func (wb *workerBench) memory(ctx context.Context, s WorkerSystem, url string) (WorkerResult, error) {
	n := wb.o.MemoryJobs
	res := WorkerResult{System: s.Name(), Config: WorkerTuned, Measure: MeasureMemory, Jobs: n}
	if err := wb.fresh(ctx, s, url); err != nil {
		return res, err
	}
	pool, err := wb.pool(ctx, url, nil)
	if err != nil {
		return res, err
	}
	defer pool.Close()
	var done atomic.Int64
	all := make(chan struct{})
	var once sync.Once
	run, err := s.Start(ctx, pool, WorkerTuned, WorkerHooks{Started: func(int64) {}, Completed: func() {
		if done.Add(1) == int64(n) {
			once.Do(func() { close(all) })
		}
	}})
	if err != nil {
		return res, err
	}
	defer func() { _ = run.Stop() }()
	time.Sleep(500 * time.Millisecond)
	res.RSSStartMB, res.HeapStartMB, res.GoroutinesPre = sample()
	t0 := time.Now()
	if err := wb.insert(ctx, s, url, n, nil); err != nil {
		return res, err
	}
	select {
	case <-all:
	case <-time.After(10 * time.Minute):
		return res, fmt.Errorf("bench: %s memory: %d of %d jobs completed", s.Name(), done.Load(), n)
	}
	res.Seconds = time.Since(t0).Seconds()
	time.Sleep(500 * time.Millisecond)
	res.RSSEndMB, res.HeapEndMB, res.GoroutinesEnd = sample()
	wb.logf("%s memory: %d jobs in %.1fs; RSS %.1f -> %.1f MB, heap %.1f -> %.1f MB, goroutines %d -> %d", s.Name(), n, res.Seconds,
		res.RSSStartMB, res.RSSEndMB, res.HeapStartMB, res.HeapEndMB, res.GoroutinesPre, res.GoroutinesEnd)
	return res, nil
}

// sample returns the process's RSS and heap in use (MB, after a GC) and
// its goroutines.
func sample() (rss, heap float64, goroutines int) {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	heap = float64(ms.HeapInuse) / (1 << 20)
	if data, err := os.ReadFile("/proc/self/status"); err == nil {
		for _, line := range strings.Split(string(data), "\n") {
			if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
				kb, _ := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 64)
				rss = kb / 1024
			}
		}
	}
	return rss, heap, runtime.NumGoroutine()
}

func cmpOr[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}
