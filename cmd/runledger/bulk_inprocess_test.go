package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sys/unix"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/internal/failpoint"
	"github.com/runledger-go/runledger/internal/testdb"
	"github.com/runledger-go/runledger/internal/txn"
	"github.com/runledger-go/runledger/replay"
)

// In-process tests of the bulk commands: run() called as main calls it,
// for what a subprocess cannot show (failpoints between statements, the
// statements sent). They replace bulkSignals, so they do not run in
// parallel.

// syncBuffer is a bytes.Buffer safe for the command's goroutines and the
// test's.
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

// fakeSignals makes bulkSignals deliver what the test sends on the
// returned channel instead of the process's signals, until the test ends.
func fakeSignals(t *testing.T) chan<- os.Signal {
	t.Helper()
	sigs := make(chan os.Signal, 4)
	prev := bulkSignals
	bulkSignals = func(c chan<- os.Signal) func() {
		stop := make(chan struct{})
		go func() {
			for {
				select {
				case s := <-sigs:
					c <- s
				case <-stop:
					return
				}
			}
		}()
		return func() { close(stop) }
	}
	t.Cleanup(func() { bulkSignals = prev })
	return sigs
}

// runIn runs a command line in this process against url and returns its
// exit code.
func runIn(ctx context.Context, url string, stdout, stderr *syncBuffer, args ...string) int {
	getenv := func(k string) string {
		if k == "DATABASE_URL" {
			return url
		}
		return ""
	}
	return run(ctx, args, stdout, stderr, getenv)
}

// seedEmail seeds n SUCCEEDED email jobs in the global scope.
func seedEmail(t *testing.T, pool *pgxpool.Pool, n int) {
	t.Helper()
	for range n {
		testdb.Seed(t, pool, testdb.Succeeded(runledger.Global()))
	}
}

type interruptMarker struct{}

// TestReplayBulkFirstInterruptLetsTheChunkCommit interrupts replay-bulk
// between the statements of its second chunk and its COMMIT, as main
// delivers Ctrl-C (the first cancels the command's context and reaches
// the signal channel, a second reaches the channel). After one, that
// chunk commits and the action stops (exit 1, the resume command with the
// bound it pinned); after two, the open chunk rolls back. The resume
// command then finishes the action, and jobs that succeeded since are not
// part of it.
func TestReplayBulkFirstInterruptLetsTheChunkCommit(t *testing.T) {
	for _, tc := range []struct {
		name      string
		signals   int
		committed int64 // lineage rows after the interrupt
	}{
		{"once", 1, 4},
		{"twice", 2, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			url := testdb.NewURL(t)
			pool := testdb.OpenPool(t, url, 2, nil)
			seedEmail(t, pool, 6)
			sigs := fakeSignals(t)
			base, cancel := context.WithCancel(context.WithValue(testdb.Context(t), interruptMarker{}, true))
			defer cancel()
			var stdout, stderr syncBuffer
			mine := func(ctx context.Context) bool { return ctx.Value(interruptMarker{}) != nil }
			commits := 0
			defer failpoint.EnableFor(txn.FailpointBeforeCommit, func(ctx context.Context, arg any) {
				if !mine(ctx) || !strings.Contains(arg.(txn.FailpointCall).Op, "bulk") {
					return
				}
				if commits++; commits != 2 {
					return
				}
				// The second chunk's replays are written, its COMMIT is next.
				cancel()
				sigs <- os.Interrupt
				testdb.WaitFor(t, "the first interrupt's notice", func() bool {
					return strings.Contains(stderr.String(), "interrupted: the current chunk finishes and commits")
				})
				if tc.signals == 2 {
					sigs <- os.Interrupt
					testdb.WaitFor(t, "the second interrupt's notice", func() bool {
						return strings.Contains(stderr.String(), "interrupted again: stopping at once")
					})
				}
			}, mine)()

			args := []string{"replay-bulk", "--type", "email", "--key", "k", "--reason", "r", "--chunk", "2"}
			code := runIn(base, url, &stdout, &stderr, args...)
			if code != exitError {
				t.Fatalf("exit %d, want 1\nstdout: %s\nstderr: %s", code, stdout.String(), stderr.String())
			}
			if n := testdb.Count(t, pool, "job_replays"); n != tc.committed {
				t.Fatalf("%d lineage rows after the interrupt, want %d (chunks committed)\nstderr: %s", n, tc.committed, stderr.String())
			}
			lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
			last := lines[len(lines)-1]
			_, resume, ok := strings.Cut(last, ": runledger ")
			if !strings.Contains(last, "interrupted") || !ok || !strings.Contains(resume, "--succeeded-until ") {
				t.Fatalf("last stderr line %q: want the interrupt and the resume command with --succeeded-until", last)
			}
			if tc.signals == 2 && !strings.Contains(last, "the open chunk rolled back") {
				t.Errorf("last stderr line %q does not say the open chunk rolled back", last)
			}
			if stdout.String() != "" {
				t.Errorf("stdout after an interrupt: %q", stdout.String())
			}

			// A job that succeeds now is after the pinned bound: the resume
			// command leaves it out.
			late := testdb.Seed(t, pool, testdb.Succeeded(runledger.Global()))
			testdb.Exec(t, pool, `UPDATE job_queue SET finished_at = now() WHERE id = $1`, late)
			var out, errOut syncBuffer
			resumeArgs := append(strings.Fields(resume), "--json")
			if code := runIn(testdb.Context(t), url, &out, &errOut, resumeArgs...); code != exitOK {
				t.Fatalf("resume %q: exit %d\n%s", resumeArgs, code, errOut.String())
			}
			want := bulkSummaryLine(false, 6, 6-int(tc.committed), int(tc.committed), 0, 0, 0, 0, 0) + "\n"
			if out.String() != want {
				t.Fatalf("resume: %s, want %s", out.String(), want)
			}
		})
	}
}

// sqlLog records the SQL of every statement a pool sends, alone or in a
// batch.
type sqlLog struct {
	mu   sync.Mutex
	sent []string
}

func (l *sqlLog) add(sql string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sent = append(l.sent, sql)
}

func (l *sqlLog) count(substr string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, s := range l.sent {
		if strings.Contains(s, substr) {
			n++
		}
	}
	return n
}

func (l *sqlLog) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	l.add(d.SQL)
	return ctx
}
func (l *sqlLog) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (l *sqlLog) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}
func (l *sqlLog) TraceBatchQuery(_ context.Context, _ *pgx.Conn, d pgx.TraceBatchQueryData) {
	l.add(d.SQL)
}
func (l *sqlLog) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// TestReplayBulkCountsOnlyForAProgressBar runs replay-bulk by filter on a
// pool that records every statement it sends: with stderr not a terminal
// (the per-chunk log) and with --json, no count of the selection is sent;
// with stderr a terminal (a pseudo-terminal the test opens), where the
// command draws a bar, the count is sent once, in the first chunk.
func TestReplayBulkCountsOnlyForAProgressBar(t *testing.T) {
	url := testdb.NewURL(t)
	seedPool := testdb.OpenPool(t, url, 1, nil)
	seedEmail(t, seedPool, 5)
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	trace := &sqlLog{}
	cfg.ConnConfig.Tracer = trace
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	tty := openTerminal(t)
	const count, page = "-- name: JobCountSucceededForReplay", "-- name: JobListSucceededForReplay"

	for i, tc := range []struct {
		name   string
		asJSON bool
		stderr interface{ Write([]byte) (int, error) }
		counts int
	}{
		{"log lines", false, &syncBuffer{}, 0},
		{"json", true, &syncBuffer{}, 0},
		{"progress bar", false, tty, 1},
	} {
		asJSON, noURL := tc.asJSON, ""
		var stdout syncBuffer
		inv := &invocation{argv: []string{"replay-bulk"}, json: &asJSON, databaseURL: &noURL, stdin: strings.NewReader(""),
			stdout: &stdout, stderr: tc.stderr, getenv: func(string) string { return "" }}
		req := replay.BulkRequest{Scope: runledger.Global(), Key: "count-" + tc.name, Reason: "r",
			Filter: &replay.Filter{JobType: "email"}, ChunkSize: 2}
		countsBefore, pagesBefore := trace.count(count), trace.count(page)
		res, err := runReplayBulk(testdb.Context(t), inv, pool, req, nil, false)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if out := res.(bulkOutput); out.Selected != 5 || out.Inserted != 5 {
			t.Fatalf("%s: %+v", tc.name, out)
		}
		if n := trace.count(page) - pagesBefore; n != 3 {
			t.Fatalf("%s: %d page statements traced, want 3 (the trace sees what is sent)", tc.name, n)
		}
		if n := trace.count(count) - countsBefore; n != tc.counts {
			t.Errorf("%s (case %d): %d count statements sent, want %d", tc.name, i, n, tc.counts)
		}
	}
}

// openTerminal opens a pseudo-terminal and returns its terminal side; what
// is written to it is read and dropped until the test ends.
func openTerminal(t *testing.T) *os.File {
	t.Helper()
	ptmx, err := os.OpenFile("/dev/ptmx", os.O_RDWR, 0)
	if err != nil {
		t.Fatalf("open a pseudo-terminal: %v", err)
	}
	t.Cleanup(func() { _ = ptmx.Close() })
	if err := unix.IoctlSetPointerInt(int(ptmx.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatalf("unlock the pseudo-terminal: %v", err)
	}
	n, err := unix.IoctlGetInt(int(ptmx.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatalf("pseudo-terminal number: %v", err)
	}
	tty, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_WRONLY|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatalf("open the terminal side: %v", err)
	}
	t.Cleanup(func() { _ = tty.Close() })
	go func() { _, _ = io.Copy(io.Discard, ptmx) }()
	return tty
}
