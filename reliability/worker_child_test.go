package reliability_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runledger-go/runledger/internal/failpoint"
	"github.com/runledger-go/runledger/internal/testdb"
	"github.com/runledger-go/runledger/worker"
)

// The worker tests run a worker in a process of its own, so that it can be
// killed with SIGKILL, paused with SIGSTOP and stopped with SIGTERM like a
// deployed one: the test binary starts itself again with childEnv set to a
// childConfig in JSON, and TestMain runs runWorkerChild instead of the
// tests. The child reports on stdout, one JSON childLine per line; its
// worker logs as JSON on stderr, which the parent keeps for a failure.

// childEnv carries a worker child's configuration.
const childEnv = "RUNLEDGER_TEST_WORKER_CHILD"

// childConfig configures a worker child.
type childConfig struct {
	URL             string        `json:"url"`
	App             string        `json:"app"` // application_name of its pool
	WorkerID        string        `json:"worker_id"`
	Lease           time.Duration `json:"lease"`
	Concurrency     int           `json:"concurrency"`
	ShutdownTimeout time.Duration `json:"shutdown_timeout"`
	// HoldType, when set, makes the child's fetcher hold, at
	// worker.FailpointAfterClaim, a claim once it has leased a job of this
	// type, until SIGTERM: those jobs are claimed and not started when
	// the shutdown begins.
	HoldType string `json:"hold_type"`
}

// childLine is one report of the child.
type childLine struct {
	// Event: "running" (Run is about to start), "started" (a handler
	// began; Job, Attempt), "ended" (a blocking handler's context ended;
	// Cause), "finished" (OnFinished; Outcome, Cause), "holding" (the
	// fetcher holds a claim, HoldType), "exited" (Run returned nil).
	Event   string    `json:"event"`
	Job     uuid.UUID `json:"job,omitempty"`
	Attempt int32     `json:"attempt,omitempty"`
	Outcome string    `json:"outcome,omitempty"`
	Cause   string    `json:"cause,omitempty"`
}

// The test job types. Every handler first records its side effect, a row
// of rl_effects (job, attempt, worker), so that an attempt run twice is
// visible in the database.
const (
	typeBlock     = "rl.block"      // blocks in a blocking worker (until its context ends); completes in another
	typeBlockLast = "rl.block-last" // rl.block with one attempt: a lost lease dead-letters it
	typeQuick     = "rl.quick"      // completes at once
	typeGate      = "rl.gate"       // waits for the gate (a shared advisory lock on gateLockKey), then completes
	typeLater     = "rl.later"      // completes at once (the SIGTERM test's unstarted claims)
)

// gateLockKey is the advisory lock rl.gate handlers wait for: the test
// holds it exclusively, each handler takes it shared.
const gateLockKey int64 = 0x726c_6761_7465 // "rlgate"

// createEffects creates the side-effect table in the test's database.
func createEffects(t testing.TB, q testdb.Querier) {
	t.Helper()
	testdb.Exec(t, q, `CREATE TABLE rl_effects (job_id uuid NOT NULL, attempt int NOT NULL, worker_id text NOT NULL,
		at timestamptz NOT NULL DEFAULT clock_timestamp())`)
}

// registerTestTypes registers the test job types on w, whose id is id.
// With block, rl.block and rl.block-last wait for their context to end,
// report the cause to ended, and then return success all the same (the
// worker must not write it once the lease is lost); without, they complete
// at once. started hears every handler's start, after its side effect.
func registerTestTypes(w *worker.Worker, pool *pgxpool.Pool, block bool, started func(worker.Job[json.RawMessage]), ended func(worker.Job[json.RawMessage], error)) error {
	effect := func(ctx context.Context, j worker.Job[json.RawMessage]) error {
		_, err := pool.Exec(ctx, `INSERT INTO rl_effects (job_id, attempt, worker_id) VALUES ($1, $2, $3)`, j.Record.ID, j.Record.Attempt, w.ID())
		if err == nil && started != nil {
			started(j)
		}
		return err
	}
	out := map[string]string{"by": w.ID()}
	blocking := func(ctx context.Context, j worker.Job[json.RawMessage]) (any, error) {
		if err := effect(ctx, j); err != nil {
			return nil, err
		}
		if block {
			<-ctx.Done()
			if ended != nil {
				ended(j, context.Cause(ctx))
			}
		}
		return out, nil
	}
	quick := func(ctx context.Context, j worker.Job[json.RawMessage]) (any, error) {
		if err := effect(ctx, j); err != nil {
			return nil, err
		}
		return out, nil
	}
	gate := func(ctx context.Context, j worker.Job[json.RawMessage]) (any, error) {
		if err := effect(ctx, j); err != nil {
			return nil, err
		}
		if _, err := pool.Exec(ctx, `SELECT pg_advisory_xact_lock_shared($1)`, gateLockKey); err != nil {
			return nil, err
		}
		return out, nil
	}
	for typ, h := range map[string]worker.Handler[json.RawMessage]{
		typeBlock: blocking, typeBlockLast: blocking, typeQuick: quick, typeGate: gate, typeLater: quick,
	} {
		if err := worker.Register(w, typ, h); err != nil {
			return err
		}
	}
	return nil
}

// runWorkerChild is the child's main: it runs a worker until SIGTERM and
// returns the exit status.
func runWorkerChild(spec string) int {
	var cfg childConfig
	if err := json.Unmarshal([]byte(spec), &cfg); err != nil {
		fmt.Fprintln(os.Stderr, "worker child:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	var outMu sync.Mutex
	enc := json.NewEncoder(os.Stdout)
	emit := func(l childLine) {
		outMu.Lock()
		defer outMu.Unlock()
		_ = enc.Encode(l)
	}
	pcfg, err := pgxpool.ParseConfig(cfg.URL)
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker child:", err)
		return 2
	}
	pcfg.MaxConns = 16
	pcfg.ConnConfig.RuntimeParams["application_name"] = cfg.App
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker child:", err)
		return 2
	}
	defer pool.Close()
	w, err := worker.New(pool, worker.Config{
		WorkerID: cfg.WorkerID, Concurrency: cfg.Concurrency, Lease: cfg.Lease, ShutdownTimeout: cfg.ShutdownTimeout,
		PollInterval: 20 * time.Millisecond, RecoveryInterval: -1,
		Logger: slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})),
		OnFinished: func(f worker.Finished) {
			l := childLine{Event: "finished", Job: f.Job.ID, Attempt: f.Job.Attempt, Outcome: string(f.Outcome)}
			if f.Err != nil {
				l.Cause = f.Err.Error()
			}
			emit(l)
		},
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker child:", err)
		return 2
	}
	err = registerTestTypes(w, pool, true,
		func(j worker.Job[json.RawMessage]) {
			emit(childLine{Event: "started", Job: j.Record.ID, Attempt: j.Record.Attempt})
		},
		func(j worker.Job[json.RawMessage], cause error) {
			l := childLine{Event: "ended", Job: j.Record.ID, Attempt: j.Record.Attempt}
			if cause != nil {
				l.Cause = cause.Error()
			}
			emit(l)
		})
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker child:", err)
		return 2
	}
	if cfg.HoldType != "" {
		// After every claim: once a job of HoldType is leased to this
		// worker (the claim that took it has returned), hold the fetcher
		// until SIGTERM.
		defer failpoint.Enable(worker.FailpointAfterClaim, func(fctx context.Context, _ any) {
			var n int64
			err := pool.QueryRow(fctx, `SELECT count(*) FROM job_queue WHERE status = 'LEASED' AND worker_id = $1 AND job_type = $2`,
				cfg.WorkerID, cfg.HoldType).Scan(&n)
			if err != nil || n == 0 {
				return
			}
			emit(childLine{Event: "holding", Cause: cfg.HoldType})
			<-ctx.Done()
		})()
	}
	emit(childLine{Event: "running"})
	if err := w.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "worker child: Run:", err)
		return 1
	}
	emit(childLine{Event: "exited"})
	return 0
}

// workerChild is a running worker child, seen from the test.
type workerChild struct {
	t   *testing.T
	cfg childConfig
	cmd *exec.Cmd

	mu      sync.Mutex
	lines   []childLine
	changed chan struct{}
	stderr  syncBuffer
	exited  chan struct{} // closed once the process has exited and its output is read
	waitErr error
}

// startWorkerChild starts a worker child on the test's database with cfg
// (its URL, App and WorkerID filled in when empty), and kills it at
// cleanup if it still runs. On failure the test logs the child's stderr.
func startWorkerChild(t *testing.T, url string, cfg childConfig) *workerChild {
	t.Helper()
	if cfg.URL == "" {
		cfg.URL = url
	}
	if cfg.App == "" {
		cfg.App = "rl-child-" + testdb.RandomHex(4)
	}
	if cfg.WorkerID == "" {
		cfg.WorkerID = "child-" + testdb.RandomHex(4)
	}
	spec, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	c := &workerChild{t: t, cfg: cfg, changed: make(chan struct{}, 1), exited: make(chan struct{})}
	c.cmd = exec.Command(exe)
	c.cmd.Env = append(os.Environ(), childEnv+"="+string(spec))
	c.cmd.Stderr = &c.stderr
	stdout, err := c.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var l childLine
			if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
				l = childLine{Event: "unparsed", Cause: sc.Text()}
			}
			c.mu.Lock()
			c.lines = append(c.lines, l)
			c.mu.Unlock()
			select {
			case c.changed <- struct{}{}:
			default:
			}
		}
		c.waitErr = c.cmd.Wait()
		close(c.exited)
		select {
		case c.changed <- struct{}{}:
		default:
		}
	}()
	t.Cleanup(func() {
		select {
		case <-c.exited:
		default:
			_ = c.cmd.Process.Kill()
			<-c.exited
		}
		if t.Failed() {
			t.Logf("worker child %s stderr:\n%s", cfg.WorkerID, c.stderr.String())
		}
	})
	return c
}

// waitLine waits until the child has reported a line that match accepts,
// and returns it; it fails the test if the child exits first or after 30
// seconds.
func (c *workerChild) waitLine(what string, match func(childLine) bool) childLine {
	c.t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		c.mu.Lock()
		for _, l := range c.lines {
			if match(l) {
				c.mu.Unlock()
				return l
			}
		}
		c.mu.Unlock()
		select {
		case <-c.exited:
			// The output is read to its end: one last look.
			c.mu.Lock()
			for _, l := range c.lines {
				if match(l) {
					c.mu.Unlock()
					return l
				}
			}
			c.mu.Unlock()
			c.t.Fatalf("the worker child exited (%v) before %s", c.waitErr, what)
		case <-c.changed:
		case <-deadline:
			c.t.Fatalf("timed out waiting for the worker child: %s", what)
		}
	}
}

// reported returns the lines the child has reported so far.
func (c *workerChild) reported() []childLine {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]childLine(nil), c.lines...)
}

// signal sends sig to the child.
func (c *workerChild) signal(sig os.Signal) {
	c.t.Helper()
	if err := c.cmd.Process.Signal(sig); err != nil {
		c.t.Fatalf("signal %v to the worker child: %v", sig, err)
	}
}

// wait waits for the child to exit and returns what cmd.Wait said.
func (c *workerChild) wait() error {
	c.t.Helper()
	select {
	case <-c.exited:
		return c.waitErr
	case <-time.After(60 * time.Second):
		c.t.Fatal("the worker child did not exit within 60 s")
		return nil
	}
}

// killed reports whether err is the exit of a process killed by sig.
func killedBy(err error, sig syscall.Signal) bool {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return false
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == sig
}

// syncBuffer is a bytes.Buffer safe for one writer and concurrent readers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
