package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runledger-go/runledger"
)

var demoCmd = &command{
	name:    "demo",
	summary: "Walk through compare-and-replay on a throwaway PostgreSQL, step by step.",
	help: `Tells the story of compare-and-replay step by step, printing each
one as the command line that does it and what happened: define a job type,
start a worker (package worker, in this process, with a real handler),
enqueue a job for tenant A, which the worker runs, replay it (inserted),
which the same worker runs, repeat the replay (existing: the same job back),
reuse the key with another reason (conflict), replay with a stale run
number (expectation mismatch), let tenant B try to replay tenant A's job
(not found), show the lineage as 'runledger jobs show' shows it (the
replay SUCCEEDED), then replay every succeeded job of the type in one bulk
action (replay-bulk by filter), run that action again (all existing); then
a charge capture dead-letters while its payment provider is down, the
provider comes back and the job is requeued in place (compare-and-requeue),
a retry of the same requeue is existing, and the worker runs the job at its
next run; finally stop the worker gracefully. Every step checks its own outcome; the demo
exits 1 if any step did not behave as the story says.

Without a database configured it starts a throwaway PostgreSQL server
from the server binaries in RUNLEDGER_PG_BINDIR, else the local ones
(initdb and postgres on PATH or under /usr/lib/postgresql/*/bin), migrates it, and removes it at the end, also when interrupted
(Ctrl-C: the server is stopped, its data removed, and the demo exits 1).

With --database-url or DATABASE_URL it uses that database instead, after
migrating it, and leaves its rows there: each run uses a job type with a
random suffix and fresh tenant ids, so the demo can run again and again on
one database.

Output (--json): {"database":"local"|"configured","steps":[{"name":"...",
"title":"...","command":"runledger ...","ok":true,"detail":"..."}, ...],"ok":true}

Exit codes: 0 every step behaved as described; 1 a step did not, the
database could not be started or reached, or the demo was interrupted.`,
	setup: func(fs *flagSet) runFunc {
		keep := fs.boolean("keep", false, "After the story, keep the throwaway server running and print its URL, until Ctrl-C (which then exits 0).")
		pace := fs.duration("pace", 0, "`D`: pause D between steps, to follow along live (2s, 1m). Default: no pause.")
		return func(ctx context.Context, inv *invocation) (result, error) {
			if *pace < 0 {
				return nil, invalidArgf("demo: --pace must not be negative")
			}
			return runDemo(ctx, inv, *keep, *pace)
		}
	},
}

// demoStep is one step of the story as --json reports it.
type demoStep struct {
	Name    string `json:"name"`
	Title   string `json:"title"`
	Command string `json:"command,omitempty"`
	OK      bool   `json:"ok"`
	Detail  string `json:"detail"`
}

// demoResult is the output of the demo.
type demoResult struct {
	Database string     `json:"database"`
	Steps    []demoStep `json:"steps"`
	OK       bool       `json:"ok"`
}

func (r demoResult) exitCode() int {
	if r.OK {
		return exitOK
	}
	return exitError
}

func (r demoResult) text(w io.Writer) {
	if r.OK {
		fmt.Fprintf(w, "\nDemo complete: all %d steps behaved as described.\n", len(r.Steps))
		return
	}
	for _, s := range r.Steps {
		if !s.OK {
			fmt.Fprintf(w, "\nDemo FAILED at step %q: %s\n", s.Title, s.Detail)
			return
		}
	}
}

// demo holds the state of one run of the story.
type demo struct {
	ctx  context.Context
	out  io.Writer // the step-by-step story; io.Discard under --json
	pace time.Duration
	res  demoResult
	db   *scratchDatabase

	pool     *pgxpool.Pool
	jobType  string
	worker   string
	tenantA  uuid.UUID
	tenantB  uuid.UUID
	wk       *demoWorker
	source   runledger.Job // the job after completion
	replayID uuid.UUID
	key      string
	reason   string
	bulkKey  string

	// The requeue story: the charge capture job type, whether its
	// provider is down (its handler fails while it is), and the job.
	chargeType   string
	providerDown atomic.Bool
	charge       runledger.Job
}

// errStepFailed marks a step whose outcome was not the story's.
var errStepFailed = errors.New("step did not behave as described")

func runDemo(ctx context.Context, inv *invocation, keep bool, pace time.Duration) (result, error) {
	suffix := randomSuffix()
	d := &demo{
		ctx:        ctx,
		out:        inv.stdout,
		pace:       pace,
		jobType:    "demo.send_invoice." + suffix,
		worker:     "demo-worker-" + suffix,
		tenantA:    uuid.New(),
		tenantB:    uuid.New(),
		key:        "resend-invoice-1042",
		reason:     "customer asked for the invoice again",
		bulkKey:    "incident-42-resend",
		chargeType: "demo.capture_charge." + suffix,
	}
	d.providerDown.Store(true)
	if inv.asJSON() {
		d.out = io.Discard
	}
	fmt.Fprintln(d.out, "runledger demo: a job's life, then compare-and-replay, step by step.")

	if err := d.openDatabase(inv); err != nil {
		return nil, err
	}
	defer func() {
		if d.pool != nil {
			d.pool.Close()
		}
	}()
	stopped := false
	stopServer := func() {
		d.haltWorker()
		if stopped || d.db.Kind == "configured" {
			return
		}
		stopped = true
		if d.pool != nil {
			d.pool.Close()
			d.pool = nil
		}
		err := d.db.Close()
		detail := "Stopped the server"
		if d.db.Dir != "" {
			detail += " and removed " + d.db.Dir
		}
		if err != nil {
			detail = "Could not stop the server cleanly: " + err.Error()
		}
		d.record("stop", "Stop the throwaway server", "", err == nil, detail+".")
	}
	defer stopServer()

	steps := []func() error{
		d.migrate, d.define, d.startWorker, d.enqueue, d.runSource,
		d.replayInserted, d.runReplay, d.replayExisting, d.replayConflict, d.replayStaleRun,
		d.replayOtherTenant, d.lineage, d.bulkReplay, d.bulkReplayAgain,
		d.chargeDeadLetters, d.requeueDeadLettered, d.requeueExisting, d.runRequeued, d.stopWorker,
	}
	for i, step := range steps {
		if i > 0 {
			d.pause()
		}
		if ctx.Err() != nil {
			stopServer()
			return nil, errInterrupted(ctx.Err())
		}
		if err := step(); err != nil {
			if ctx.Err() != nil {
				stopServer()
				return nil, errInterrupted(err)
			}
			break
		}
	}
	if d.allOK() && keep && d.db.Kind != "configured" {
		hint := inv.stdout
		if inv.asJSON() {
			hint = inv.stderr
		}
		fmt.Fprintf(hint, "\nThe server keeps running. In another shell:\n  export DATABASE_URL='%s'\n  runledger jobs show %s --org %s\nPress Ctrl-C to stop it.\n",
			d.db.URL, d.source.ID, d.tenantA)
		<-ctx.Done()
	}
	stopServer()
	if ctx.Err() != nil && !keep {
		return nil, errInterrupted(ctx.Err())
	}
	d.res.OK = d.allOK()
	for _, s := range d.res.Steps {
		if !s.OK && !inv.asJSON() {
			fmt.Fprintf(inv.stderr, "runledger demo: step %q did not behave as described: %s\n", s.Title, oneLine(s.Detail))
		}
	}
	return d.res, nil
}

// allOK reports whether every step so far behaved as described.
func (d *demo) allOK() bool {
	for _, s := range d.res.Steps {
		if !s.OK {
			return false
		}
	}
	return len(d.res.Steps) > 0
}

// openDatabase is step 1: use the configured database or start one.
func (d *demo) openDatabase(inv *invocation) error {
	if !inv.hasURL() {
		fmt.Fprintln(d.out, "\nNo database configured (--database-url, DATABASE_URL): starting a throwaway PostgreSQL server...")
	}
	db, err := openScratchDatabase(d.ctx, inv)
	if err != nil {
		return err
	}
	d.db = db
	d.res.Database = db.Kind
	var detail string
	switch db.Kind {
	case "configured":
		from := "DATABASE_URL"
		if strings.TrimSpace(*inv.databaseURL) != "" {
			from = "--database-url"
		}
		detail = fmt.Sprintf("Using the database from %s at %s (no server started). The demo's rows stay there, under job type %s.",
			from, db.Address, d.jobType)
	default:
		detail = fmt.Sprintf("Started PostgreSQL from %s on %s; its data is in %s until the demo ends.", db.BinDir, db.Address, db.Dir)
	}
	title := "Start a throwaway PostgreSQL server"
	if db.Kind == "configured" {
		title = "Use the configured database"
	}
	d.record("database", title, "", true, detail)
	pool, err := openPool(d.ctx, db.URL)
	if err != nil {
		_ = db.Close()
		return err
	}
	d.pool = pool
	return nil
}

// pause waits --pace, or until the demo is interrupted.
func (d *demo) pause() {
	if d.pace <= 0 {
		return
	}
	t := time.NewTimer(d.pace)
	defer t.Stop()
	select {
	case <-t.C:
	case <-d.ctx.Done():
	}
}

// record appends a finished step and prints it.
func (d *demo) record(name, title, command string, ok bool, detail string) {
	d.res.Steps = append(d.res.Steps, demoStep{Name: name, Title: title, Command: command, OK: ok, Detail: detail})
	fmt.Fprintf(d.out, "\n%2d. %s\n", len(d.res.Steps), title)
	if command != "" {
		fmt.Fprintf(d.out, "    $ %s\n", command)
	}
	fmt.Fprint(d.out, indent(detail, "    "))
	if !ok {
		fmt.Fprintln(d.out, "    FAILED: this is not what the story says should happen.")
	}
}

// step runs fn, which prints what happened on its writer and returns an
// error if the outcome was not the story's; it records the step either way.
func (d *demo) step(name, title, command string, fn func(w io.Writer) error) error {
	var b bytes.Buffer
	err := fn(&b)
	if err != nil && d.ctx.Err() != nil {
		return err // interrupted: not the step's failure
	}
	detail := strings.TrimRight(b.String(), "\n")
	if err != nil {
		if detail != "" {
			detail += "\n"
		}
		detail += describeStepError(err)
	}
	d.record(name, title, command, err == nil, detail)
	return err
}

func describeStepError(err error) string {
	if errors.Is(err, errStepFailed) {
		return err.Error()
	}
	code, _, message, detail := describe(err)
	s := fmt.Sprintf("unexpected error: %s (%s)", message, code)
	if detail != "" {
		s += ": " + detail
	}
	return s
}

// failf reports an outcome that differs from the story.
func failf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", errStepFailed, fmt.Sprintf(format, args...))
}

// indent prefixes every line of s, which it ends with a newline.
func indent(s, prefix string) string {
	if s == "" {
		return ""
	}
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	for i, l := range lines {
		if l != "" {
			lines[i] = prefix + l
		}
	}
	return strings.Join(lines, "\n") + "\n"
}

// randomSuffix is 8 hex digits that make a demo run's names unique.
func randomSuffix() string {
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		return fmt.Sprintf("%08x", time.Now().UnixNano()&0xffffffff)
	}
	return hex.EncodeToString(b)
}

func ptr[T any](v T) *T { return &v }
