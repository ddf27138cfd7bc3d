package main

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/runledger-go/runledger/goose"
	"github.com/runledger-go/runledger/internal/pgserver"
	"github.com/runledger-go/runledger/jobs"
)

// Application names of the soak's pools, to find their backends in
// pg_stat_activity.
const (
	appClients  = "soak-client"
	appMonitor  = "soak-monitor"
	appProducer = "soak-producer"
)

// Job types the clients use, with the settings every definition upsert
// repeats (so upserts after the first change nothing).
var jobTypes = []struct {
	name        string
	maxAttempts int32
	timeout     int32
	priority    int32
}{
	{"soak.email", 3, 60, 100},
	{"soak.report", 2, 120, 50},
}

// run is the whole soak; it returns the exit status.
func run(ctx context.Context, cfg config) int {
	logf := func(string, ...any) {}
	if cfg.verbose {
		logf = func(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }
	}
	srv, err := pgserver.Start(ctx, pgserver.Options{Durable: true, Logf: logf})
	if err != nil {
		fmt.Fprintln(os.Stderr, "soak: start a durable throwaway server:", err)
		return 2
	}
	defer func() {
		if err := srv.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "soak:", err)
		}
	}()
	url := srv.URL("postgres")

	rep := &report{cfg: cfg, started: time.Now()}
	if err := setup(ctx, url, rep); err != nil {
		fmt.Fprintln(os.Stderr, "soak: setup:", err)
		return 2
	}

	acks, err := newAckLog()
	if err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		return 2
	}
	defer acks.remove()

	pool, err := openPool(ctx, url, appClients, int32(cfg.clients))
	if err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		return 2
	}
	defer pool.Close()
	// The monitor's two connections: the sampler's and the watch's.
	monitor, err := openPool(ctx, url, appMonitor, 2)
	if err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		return 2
	}
	defer monitor.Close()
	// Each worker's own pool.
	wpools := make([]*pgxpool.Pool, cfg.workers)
	for i := range wpools {
		wpools[i], err = openPool(ctx, url, appWorker, int32(workerPoolSize(cfg)))
		if err != nil {
			fmt.Fprintln(os.Stderr, "soak:", err)
			return 2
		}
		defer wpools[i].Close()
	}
	producerPool, err := openPool(ctx, url, appProducer, producerInFlight)
	if err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		return 2
	}
	defer producerPool.Close()

	st := newStats()
	rt, err := newRuntimeLoad(cfg, wpools, producerPool, st, acks)
	if err != nil {
		fmt.Fprintln(os.Stderr, "soak: worker:", err)
		return 2
	}
	rep.rt = rt
	wt := newWatch(cfg, st)
	rep.watch = wt
	loadCtx, stopLoad := context.WithTimeout(ctx, cfg.duration)
	defer stopLoad()
	start := time.Now()
	st.start = start

	// The workers run until they are told to stop after the drain; the
	// producer for the load's duration; the watch until the workers have
	// stopped.
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	watchDone := make(chan struct{})
	go func() {
		defer close(watchDone)
		wt.run(watchCtx, monitor)
	}()
	workerCtx, stopWorker := context.WithCancel(ctx)
	defer stopWorker()
	workerDone := make(chan struct{})
	go func() {
		defer close(workerDone)
		rt.run(workerCtx)
	}()
	var producerWG sync.WaitGroup
	producerWG.Add(1)
	go func() {
		defer producerWG.Done()
		rt.produce(loadCtx)
	}()

	var wg sync.WaitGroup
	for i := 0; i < cfg.clients; i++ {
		c := newClient(i, pool, st, acks, cfg.lease)
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.loop(loadCtx)
		}()
	}

	// The sampler runs until the worker has stopped, and takes a sample at
	// once for each note it is sent (the clients stopped, the worker
	// drained and stopped).
	ids := workerIDs(cfg)
	samplerDone := make(chan struct{})
	notes := make(chan string)
	go func() {
		defer close(samplerDone)
		tick := time.NewTicker(cfg.sample)
		defer tick.Stop()
		rep.addSample(takeSample(ctx, monitor, pool, wpools, ids, st, start, ""))
		for {
			select {
			case <-tick.C:
				rep.addSample(takeSample(ctx, monitor, pool, wpools, ids, st, start, ""))
			case note, ok := <-notes:
				if !ok {
					return
				}
				rep.addSample(takeSample(ctx, monitor, pool, wpools, ids, st, start, note))
			}
		}
	}()

	restartDelay := time.Duration(float64(cfg.duration) * cfg.restartAt)
	select {
	case <-time.After(time.Until(start.Add(restartDelay))):
		t0 := time.Now()
		st.setRestart(t0, time.Time{})
		err := srv.RestartAfter(ctx, cfg.restartMode, cfg.restartDown)
		t1 := time.Now()
		st.setRestart(t0, t1)
		if err != nil {
			rep.fail("restart (%s) failed: %v", cfg.restartMode, err)
			stopLoad()
		}
		logf("soak: restart (%s) at %s took %s", cfg.restartMode, t0.Sub(start).Round(time.Millisecond), t1.Sub(t0).Round(time.Millisecond))
	case <-loadCtx.Done():
		rep.fail("the load ended (%v) before the restart", context.Cause(loadCtx))
	}

	wg.Wait()
	producerWG.Wait()
	rep.elapsed = time.Since(start)
	notes <- "clients stopped"
	// The worker drains what is left (retries, long jobs), then shuts
	// down: a clean shutdown leaves none of its jobs LEASED.
	rt.drain(ctx, monitor, 3*time.Minute)
	notes <- "worker drained"
	stopWorker()
	select {
	case <-workerDone:
	case <-time.After(time.Minute):
		rep.fail("worker: Run did not return within a minute of its context's end")
	}
	notes <- "worker stopped"
	close(notes)
	<-samplerDone
	stopWatch()
	<-watchDone
	if ctx.Err() != nil {
		rep.fail("interrupted after %s", rep.elapsed.Round(time.Second))
	}

	if err := acks.close(); err != nil {
		rep.fail("acknowledgement log: %v", err)
	}
	pool.Close()
	for _, p := range wpools {
		p.Close()
	}
	producerPool.Close()
	monitor.Close()
	runtime.GC()

	checkCtx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	checkLedger(checkCtx, url, acks, st, rep, wt)

	rep.judge(st)
	rep.print(os.Stdout, st)
	if len(rep.failures) > 0 {
		return 1
	}
	return 0
}

// setup migrates the server, defines the job types and records the
// server's version.
func setup(ctx context.Context, url string, rep *report) error {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return err
	}
	sqlDB := stdlib.OpenDB(*cfg)
	defer sqlDB.Close()
	if err := goose.Up(ctx, sqlDB); err != nil {
		return err
	}
	pool, err := openPool(ctx, url, "soak-setup", 1)
	if err != nil {
		return err
	}
	defer pool.Close()
	for _, jt := range jobTypes {
		if _, err := jobs.UpsertDefinition(ctx, pool, definitionInput(jt.name)); err != nil {
			return fmt.Errorf("define %s: %w", jt.name, err)
		}
	}
	attempts, timeout := int32(workMaxAttempts), int32(workTimeout)
	if _, err := jobs.UpsertDefinition(ctx, pool, jobs.DefinitionInput{JobType: workType, MaxAttempts: &attempts, TimeoutSeconds: &timeout}); err != nil {
		return fmt.Errorf("define %s: %w", workType, err)
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE soak_effects (job_id uuid NOT NULL, attempt int NOT NULL,
		at timestamptz NOT NULL DEFAULT clock_timestamp());
		CREATE INDEX ON soak_effects (job_id, attempt)`); err != nil {
		return fmt.Errorf("create soak_effects: %w", err)
	}
	return pool.QueryRow(ctx, `SELECT current_setting('server_version') || ', fsync ' || current_setting('fsync')
		|| ', synchronous_commit ' || current_setting('synchronous_commit')
		|| ', max_connections ' || current_setting('max_connections')`).Scan(&rep.server)
}

// definitionInput is the upsert for a job type, with its fixed settings.
func definitionInput(name string) jobs.DefinitionInput {
	for _, jt := range jobTypes {
		if jt.name == name {
			jt := jt
			enabled := true
			return jobs.DefinitionInput{JobType: name, MaxAttempts: &jt.maxAttempts,
				TimeoutSeconds: &jt.timeout, Priority: &jt.priority, Enabled: &enabled}
		}
	}
	panic("soak: unknown job type " + name)
}

// openPool opens a pool whose connections carry application_name app.
func openPool(ctx context.Context, url, app string, maxConns int32) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = maxConns
	cfg.ConnConfig.RuntimeParams["application_name"] = app
	cfg.ConnConfig.ConnectTimeout = 5 * time.Second
	return pgxpool.NewWithConfig(ctx, cfg)
}
