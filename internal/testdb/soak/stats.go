package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runledger-go/runledger"
)

// Retryable error classes: what a client retries with the same request.
const (
	classTransient   = "transient"
	classUnconfirmed = "commit_unconfirmed"
)

// errKey groups retryable errors for the report.
type errKey struct{ op, class, cause string }

// errAgg is how often one kind of retryable error happened, and when.
type errAgg struct {
	count       int64
	first, last time.Time
}

// stats is what the clients did, shared by all of them. Memory is bounded:
// counters and aggregates only, whatever the duration.
type stats struct {
	start time.Time
	total atomic.Int64 // completed operations, for the rate

	mu          sync.Mutex
	ops         map[string]int64
	errs        map[errKey]*errAgg
	unexpected  []string // failures, capped at maxFailures
	nUnexpected int64
	// unkeyedLost counts failed attempts of unkeyed enqueues: each may
	// have inserted a job whose id no client was told.
	unkeyedLost  int64
	restartBegan time.Time
	restartEnded time.Time
	firstErr     time.Time
	lastErr      time.Time
}

const maxFailures = 50

func newStats() *stats {
	return &stats{ops: map[string]int64{}, errs: map[errKey]*errAgg{}}
}

// op counts one completed operation of a kind.
func (s *stats) op(kind string) {
	s.total.Add(1)
	s.mu.Lock()
	s.ops[kind]++
	s.mu.Unlock()
}

// opN adds n to a counter that is not an operation (jobs claimed, ...).
func (s *stats) opN(kind string, n int64) {
	s.mu.Lock()
	s.ops[kind] += n
	s.mu.Unlock()
}

// failure records something that must fail the soak.
func (s *stats) failure(format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nUnexpected++
	if len(s.unexpected) < maxFailures {
		s.unexpected = append(s.unexpected, time.Since(s.start).Round(time.Millisecond).String()+": "+fmt.Sprintf(format, args...))
	}
}

// retryable records one failed attempt that the client will retry.
func (s *stats) retryable(op, class, cause string, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := errKey{op, class, cause}
	a := s.errs[k]
	if a == nil {
		a = &errAgg{first: at}
		s.errs[k] = a
	}
	a.count++
	a.last = at
	if s.firstErr.IsZero() {
		s.firstErr = at
	}
	s.lastErr = at
}

// setRestart records when the restart began and (once known) ended.
func (s *stats) setRestart(began, ended time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.restartBegan, s.restartEnded = began, ended
}

// classify names a retryable error's class, or "" for any other error.
func classify(err error) string {
	switch {
	case errors.Is(err, runledger.ErrCommitUnconfirmed):
		return classUnconfirmed
	case runledger.IsTransient(err):
		return classTransient
	}
	return ""
}

// cause names the failure behind an error: its SQLSTATE, or the kind of
// connection failure.
func cause(err error) string {
	var e *runledger.Error
	if errors.As(err, &e) && e.SQLState != "" {
		return "sqlstate " + e.SQLState
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return "sqlstate " + pgErr.Code
	}
	var connErr *pgconn.ConnectError
	if errors.As(err, &connErr) {
		return "connect failed"
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return "deadline"
	}
	return "connection lost"
}

// describe is an error with the code and detail of a runledger error.
func describe(err error) string {
	var e *runledger.Error
	if errors.As(err, &e) {
		return fmt.Sprintf("%v [code %s, category %s, detail %q]", err, runledger.CodeOf(err), runledger.CategoryOf(err), e.Detail)
	}
	return err.Error()
}

// sample is one reading of the process and the server.
type sample struct {
	at          time.Duration // since the load began
	rssKB       int64         // VmRSS of /proc/self/status
	heapInuse   uint64        // runtime.MemStats.HeapInuse
	goroutines  int
	poolConns   int32 // connections the client pool holds
	serverConns int   // backends of the client pool (pg_stat_activity)
	workerPool  int32 // connections the workers' pools hold
	workerConns int   // backends of the workers' pools
	idleInTx    int   // of those, idle inside a transaction right now
	allClients  int   // every client backend, the monitor's included
	pending     int64 // jobs PENDING
	leased      int64 // jobs LEASED
	jobs        int64 // every job
	// workerLeases is the most LEASED jobs one of the runtime's workers
	// holds (claimed, running, or finished and not yet committed): never
	// above its Concurrency. deadlocks is pg_stat_database.deadlocks of the
	// database, a counter since the server started.
	workerLeases int64
	deadlocks    int64
	taken        time.Time
	opsPerSec    float64
	note         string
	serverErr    string
}

// lastTotal and lastAt remember the previous sample for the rate.
var (
	lastTotal int64
	lastAt    time.Duration
)

// takeSample reads memory and goroutines from the process and the
// connection counts and queue depth from the server (over the monitor
// pool, whose own backend is counted only in allClients).
func takeSample(ctx context.Context, monitor, clients *pgxpool.Pool, workers []*pgxpool.Pool, ids []string, st *stats, start time.Time, note string) sample {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	s := sample{
		at:         time.Since(start),
		taken:      time.Now(),
		rssKB:      vmRSS(),
		heapInuse:  ms.HeapInuse,
		goroutines: runtime.NumGoroutine(),
		poolConns:  clients.Stat().TotalConns(),
		note:       note,
	}
	for _, p := range workers {
		s.workerPool += p.Stat().TotalConns()
	}
	total := st.total.Load()
	if d := (s.at - lastAt).Seconds(); d > 0 {
		s.opsPerSec = float64(total-lastTotal) / d
	}
	lastTotal, lastAt = total, s.at

	qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	err := monitor.QueryRow(qctx, `
		SELECT count(*) FILTER (WHERE application_name = $1),
		       count(*) FILTER (WHERE application_name = $1 AND state LIKE 'idle in transaction%'),
		       count(*) FILTER (WHERE application_name = $2),
		       count(*)
		FROM pg_stat_activity WHERE backend_type = 'client backend'`, appClients, appWorker).Scan(&s.serverConns, &s.idleInTx, &s.workerConns, &s.allClients)
	if err == nil {
		err = monitor.QueryRow(qctx, `
			SELECT count(*) FILTER (WHERE status = 'PENDING'), count(*) FILTER (WHERE status = 'LEASED'), count(*)
			FROM job_queue`).Scan(&s.pending, &s.leased, &s.jobs)
	}
	if err == nil {
		err = monitor.QueryRow(qctx, `
			SELECT (SELECT coalesce(max(n), 0) FROM (SELECT count(*) AS n FROM job_queue
			        WHERE status = 'LEASED' AND worker_id = ANY($1) GROUP BY worker_id) l),
			       (SELECT deadlocks FROM pg_stat_database WHERE datname = current_database())`, ids).Scan(&s.workerLeases, &s.deadlocks)
	}
	if err != nil {
		s.serverConns, s.workerConns, s.allClients, s.pending, s.leased, s.jobs = -1, -1, -1, -1, -1, -1
		s.workerLeases, s.deadlocks = -1, -1
		s.serverErr = cause(err)
	}
	return s
}

// vmRSS returns the process's resident set size in kB, from VmRSS in
// /proc/self/status, or -1 when it cannot be read.
func vmRSS() int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return -1
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			if err != nil {
				return -1
			}
			return n
		}
	}
	return -1
}
