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
	"github.com/runledger-go/runledger/internal/testdb/pgtemp"
	"github.com/runledger-go/runledger/jobs"
)

// Application names of the soak's pools, to find their backends in
// pg_stat_activity.
const (
	appClients = "soak-client"
	appMonitor = "soak-monitor"
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
	srv, err := pgtemp.Start(ctx, pgtemp.Options{Durable: true, Logf: logf})
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
	monitor, err := openPool(ctx, url, appMonitor, 1)
	if err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		return 2
	}
	defer monitor.Close()

	st := newStats()
	loadCtx, stopLoad := context.WithTimeout(ctx, cfg.duration)
	defer stopLoad()
	start := time.Now()
	st.start = start

	var wg sync.WaitGroup
	for i := 0; i < cfg.clients; i++ {
		c := newClient(i, pool, st, acks, cfg.lease)
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.loop(loadCtx)
		}()
	}

	// The sampler runs until the clients have stopped, and takes one last
	// sample then.
	samplerDone := make(chan struct{})
	clientsDone := make(chan struct{})
	go func() {
		defer close(samplerDone)
		tick := time.NewTicker(cfg.sample)
		defer tick.Stop()
		rep.addSample(takeSample(ctx, monitor, pool, st, start, ""))
		for {
			select {
			case <-tick.C:
				rep.addSample(takeSample(ctx, monitor, pool, st, start, ""))
			case <-clientsDone:
				rep.addSample(takeSample(ctx, monitor, pool, st, start, "clients stopped"))
				return
			}
		}
	}()

	restartDelay := time.Duration(float64(cfg.duration) * cfg.restartAt)
	select {
	case <-time.After(time.Until(start.Add(restartDelay))):
		t0 := time.Now()
		st.setRestart(t0, time.Time{})
		err := srv.Restart(ctx, cfg.restartMode)
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
	close(clientsDone)
	<-samplerDone
	rep.elapsed = time.Since(start)
	if ctx.Err() != nil {
		rep.fail("interrupted after %s", rep.elapsed.Round(time.Second))
	}

	if err := acks.close(); err != nil {
		rep.fail("acknowledgement log: %v", err)
	}
	pool.Close()
	monitor.Close()
	runtime.GC()

	checkCtx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	checkLedger(checkCtx, url, acks, st, rep)

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
