package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/schollz/progressbar/v3"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/internal/redact"
)

// The command-line side of every bulk command (replay-bulk, and the ones
// built the same way): a progress bar or a log line per chunk on stderr,
// details on stdout, the interrupt handling and the resume command. A
// command describes itself with a bulkKind, runs its library call inside
// bulkRunner.run, and turns each chunk the library reports into a
// bulkProgress for bulkRunner.chunk.

// exitRefused is a bulk command's exit code when at least one selected
// source was refused: the others are done, those are not.
const exitRefused = 6

// bulkKind describes a bulk command to the shared runner.
type bulkKind struct {
	// cmd is the command's name ("replay-bulk"), which starts its messages.
	cmd string
	// outcomes are the names of a source's results, in summary order; the
	// first accepted of them are successes, the others refusals.
	outcomes []string
	accepted int
	// untilFlag is the flag that bounds a filter from above
	// ("--succeeded-until"): the resume command of an open-ended filter
	// gets it with the bound the action pinned at its first page.
	untilFlag string
}

// bulkProgress is one finished chunk as the command line shows it,
// whatever the operation.
type bulkProgress struct {
	// index counts chunks from 0; attempts is how many times its
	// transaction ran (more than 1 after a deadlock).
	index, attempts int
	// counts are this chunk's results by outcome (bulkKind.outcomes),
	// total the action's so far; done is the number of sources done.
	counts, total []int
	done          int
	// expected is the number of sources selected in all, 0 when unknown.
	expected int
	// until is a filter's upper bound as pinned (nil for a list).
	until *time.Time
}

// sources is the number of results in the chunk.
func (p bulkProgress) sources() int {
	n := 0
	for _, c := range p.counts {
		n += c
	}
	return n
}

// bulkSignals delivers SIGINT and SIGTERM to c until the returned function
// is called. Tests replace it to interrupt an in-process run.
var bulkSignals = func(c chan<- os.Signal) (stop func()) {
	signal.Notify(c, os.Interrupt, syscall.SIGTERM)
	return func() { signal.Stop(c) }
}

// bulkRunner runs one bulk action for the command line: progress on
// stderr (a bar when stderr is a terminal and --json is not given, else a
// line per chunk without --json), details on stdout, interrupts, and the
// error that stops the action turned into the command's error.
type bulkRunner struct {
	inv       *invocation
	kind      bulkKind
	dryRun    bool
	openEnded bool // a filter without an upper bound
	fromStdin bool // the sources are read from stdin
	out       *bufio.Writer
	bar       bool // draw a progress bar on stderr
	log       bool // print a line per chunk on stderr
	stopCh    chan struct{}

	mu          sync.Mutex // stderr, and the fields below
	drawn       bool       // a bar is on the current stderr line
	pb          *progressbar.ProgressBar
	pbMax       int64 // pb's total, -1 when not known
	began, last time.Time
	ended       time.Duration
	total       int // sources selected in all, 0 when unknown
	chunks      int
	done        int
	counts      []int
	until       *time.Time
	interrupted bool // the first interrupt came: no chunk begins after the current one
	hard        bool // the second came: the open chunk rolls back
}

func newBulkRunner(inv *invocation, kind bulkKind, dryRun bool) *bulkRunner {
	r := &bulkRunner{inv: inv, kind: kind, dryRun: dryRun, out: bufio.NewWriterSize(inv.stdout, 64<<10),
		stopCh: make(chan struct{}), counts: make([]int, len(kind.outcomes))}
	if isTerminal(inv.stderr) && !inv.asJSON() {
		r.bar = true
	} else {
		r.log = !inv.asJSON()
	}
	return r
}

// wantsCount reports whether a filter's selection should be counted for
// the progress display: only a progress bar needs the total. A count
// reads the whole selection (see docs/PERFORMANCE.md), so the per-chunk
// log and --json go without it.
func (r *bulkRunner) wantsCount() bool { return r.bar }

// setTotal records the number of sources when known before the action
// (a checked --from list).
func (r *bulkRunner) setTotal(n int) { r.total = n }

// stop is closed by the first interrupt: the library finishes the chunk
// in flight and begins no other.
func (r *bulkRunner) stop() <-chan struct{} { return r.stopCh }

// run runs act, the library call, with a context that only the second
// interrupt cancels, and returns the command's error for what act
// returned (nil when it finished). The first interrupt (ctx's end, which
// is how main reports the first SIGINT or SIGTERM, or the first signal
// itself) closes stop(): the chunk in flight commits and the action
// stops. A second signal cancels act's context: the statement in flight
// is canceled and the open chunk rolls back. Either way the error names
// what was committed and the command that resumes.
func (r *bulkRunner) run(ctx context.Context, act func(ctx context.Context) error) error {
	actx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	sigs := make(chan os.Signal, 4)
	stopSignals := bulkSignals(sigs)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		ctxDone, signals := ctx.Done(), 0
		for {
			select {
			case <-done:
				return
			case <-ctxDone:
				ctxDone = nil
				r.interrupt(false)
			case <-sigs:
				// The first signal is also ctx's end when main is the caller.
				if signals++; signals == 1 {
					r.interrupt(false)
					continue
				}
				cancel() // before the notice, which says it is done
				r.interrupt(true)
				return
			}
		}
	}()
	r.start()
	err := act(actx)
	close(done)
	wg.Wait()
	stopSignals()
	r.end()
	if err != nil {
		return r.failed(err)
	}
	return nil
}

// interrupt records an interrupt and says on stderr what happens now
// (not under --json, where stderr carries only the final error).
func (r *bulkRunner) interrupt(hard bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	first := !r.interrupted
	if first {
		r.interrupted = true
		close(r.stopCh)
	}
	notice := ""
	switch {
	case hard && !r.hard:
		r.hard = true
		notice = "interrupted again: stopping at once; the open chunk rolls back"
	case first:
		notice = "interrupted: the current chunk finishes and commits, then the action stops; press Ctrl-C again to stop at once (the open chunk rolls back)"
		if r.dryRun {
			notice = "interrupted: the current chunk finishes (and rolls back: dry run), then the action stops; press Ctrl-C again to stop at once"
		}
	}
	if notice == "" || (!r.bar && !r.log) {
		return
	}
	r.clearBar()
	fmt.Fprintf(r.inv.stderr, "runledger %s: %s\n", r.kind.cmd, notice)
}

// start records the start and draws the empty bar.
func (r *bulkRunner) start() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.began, r.last = time.Now(), time.Now()
	if r.bar {
		r.draw()
	}
}

// chunk shows a finished chunk: its details (details may be nil; it
// writes them to w, as JSON lines when asJSON) and progress.
func (r *bulkRunner) chunk(p bulkProgress, details func(w io.Writer, asJSON bool)) error {
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	took := now.Sub(r.last)
	r.last = now
	r.chunks++
	r.done = p.done
	copy(r.counts, p.total)
	if p.expected > 0 {
		r.total = p.expected
	}
	if p.until != nil {
		u := *p.until
		r.until = &u
	}
	if details != nil && p.sources() > 0 {
		r.clearBar()
		details(r.out, r.inv.asJSON())
		_ = r.out.Flush()
	}
	switch {
	case r.bar:
		r.draw()
	case r.log:
		r.logChunk(p, took)
	}
	return nil
}

// logChunk prints one line for a finished chunk.
func (r *bulkRunner) logChunk(p bulkProgress, took time.Duration) {
	what := "committed"
	if r.dryRun {
		what = "rolled back (dry run)"
	}
	if p.attempts > 1 {
		what += fmt.Sprintf(" (run %d times: PostgreSQL aborted it to break a deadlock)", p.attempts)
	}
	done := groupDigits(p.done)
	if r.total > 0 {
		done = progressCount(p.done, r.total)
	}
	fmt.Fprintf(r.inv.stderr, "runledger %s: chunk %d %s: %s in %s (%s); %s done, %s sources/s\n",
		r.kind.cmd, p.index+1, what, count(p.sources(), "source"), roundDuration(took), r.countsText(p.counts),
		done, groupDigits(perSecond(p.done, time.Since(r.began))))
}

// draw redraws the progress bar on the current stderr line: the count
// and rate while the total is not known (it rides a filter's first
// chunk), then the bar with its percentage, rate and time left.
func (r *bulkRunner) draw() {
	total := int64(-1)
	if r.total > 0 {
		total = int64(max(r.total, r.done))
	}
	if r.pb == nil || r.pbMax != total {
		r.pb = progressbar.NewOptions64(total,
			progressbar.OptionSetWriter(r.inv.stderr),
			progressbar.OptionSetWidth(30),
			progressbar.OptionShowCount(),
			progressbar.OptionShowIts(),
			progressbar.OptionSetItsString("sources"),
			progressbar.OptionSetPredictTime(true),
			progressbar.OptionUseANSICodes(true),
			// Redrawn only here, under r.mu: no throttle and no spinner
			// goroutine writing to stderr on its own.
			progressbar.OptionThrottle(0),
			progressbar.OptionSetSpinnerChangeInterval(0),
			progressbar.OptionSetRenderBlankState(true),
		)
		r.pbMax = total
	}
	desc := r.kind.cmd
	if refused := r.refused(r.counts); refused > 0 {
		desc += fmt.Sprintf(" (refused %s)", groupDigits(refused))
	}
	if r.dryRun {
		desc += " (dry run)"
	}
	r.pb.Describe(desc)
	_ = r.pb.Set(r.done)
	r.drawn = true
}

// clearBar erases the bar so that other output starts on a clean line.
func (r *bulkRunner) clearBar() {
	if r.drawn {
		_ = r.pb.Clear()
		r.drawn = false
	}
}

// end leaves the bar's line (the last drawing stays), flushes stdout and
// records the elapsed time.
func (r *bulkRunner) end() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ended = time.Since(r.began)
	if r.drawn {
		fmt.Fprintln(r.inv.stderr)
		r.drawn = false
	}
	_ = r.out.Flush()
}

// elapsed is the action's duration, once it ended.
func (r *bulkRunner) elapsed() time.Duration { return r.ended }

// refused sums the refusals in counts.
func (r *bulkRunner) refused(counts []int) int {
	n := 0
	for _, c := range counts[r.kind.accepted:] {
		n += c
	}
	return n
}

// countsText lists the outcomes that occurred: "inserted 998, existing 2".
func (r *bulkRunner) countsText(counts []int) string {
	var parts []string
	for i, c := range counts {
		if c > 0 {
			parts = append(parts, r.kind.outcomes[i]+" "+groupDigits(c))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// resume is the command that resumes the action, with what it needs said:
// the same command, or, for an open-ended filter whose bound was pinned,
// the same command with that bound.
func (r *bulkRunner) resume() string {
	var extra []string
	how := "run the same command again"
	if r.openEnded && r.until != nil {
		at := r.until.UTC().Format(time.RFC3339Nano)
		extra = []string{r.kind.untilFlag, at}
		how = fmt.Sprintf("run the same command with %s %s, the bound it pinned at its start", r.kind.untilFlag, at)
	}
	cmd := r.inv.redact.String(resumeCommand(r.inv.argv, extra...))
	var notes []string
	if r.fromStdin {
		notes = append(notes, "with the same list on stdin")
	}
	if strings.Contains(cmd, redact.Mask) && !strings.Contains(strings.Join(r.inv.argv, " "), redact.Mask) {
		notes = append(notes, "the database password is hidden")
	}
	if len(notes) > 0 {
		cmd += " (" + strings.Join(notes, "; ") + ")"
	}
	return "to resume, " + how + ": " + cmd
}

// failed turns the error that stopped the action into the command's
// error. An interrupt becomes cli.interrupted, naming what was done and
// the command that resumes; for any other error after committed chunks, a
// line before the error (not under --json) says they stay and how to
// resume.
func (r *bulkRunner) failed(err error) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	done := "no chunk was committed"
	switch {
	case r.dryRun:
		done = "nothing was written (dry run)"
	case r.chunks > 0:
		done = fmt.Sprintf("the %s committed before stay (%s: %s)", count(r.chunks, "chunk"), count(r.done, "source"), r.countsText(r.counts))
	}
	if r.interrupted {
		if r.hard && !r.dryRun {
			done += "; the open chunk rolled back"
		}
		return &runledger.Error{
			Code: "cli.interrupted", Category: runledger.CategoryInternal,
			Message: fmt.Sprintf("%s: interrupted: %s; %s", r.kind.cmd, done, r.resume()),
			Err:     err,
		}
	}
	if r.chunks > 0 && !r.inv.asJSON() && !r.dryRun {
		fmt.Fprintf(r.inv.stderr, "runledger %s: stopped by the error below; %s; %s\n", r.kind.cmd, done, r.resume())
	}
	return err
}

// writeBulkCounts prints the summary's count lines, one per outcome,
// aligned.
func writeBulkCounts(w io.Writer, names []string, counts []int, selected int) {
	width := len(groupDigits(selected))
	for i, name := range names {
		fmt.Fprintf(w, "  %-22s  %*s\n", name, width, groupDigits(counts[i]))
	}
}

// bulkFlags are the flags every bulk command shares, as parsed, and the
// validation codes its library gives their refusals.
type bulkFlags struct {
	// cmd starts the messages; filter is the flag a filter requires with
	// its placeholder ("--type T"); what names what the rate counts
	// ("replays").
	cmd, filter, what string
	// fromSet and filterSet say whether --from and the filter's required
	// flag were given; filterOnly lists the other filter flags given.
	fromSet, filterSet bool
	filterOnly         []string
	chunk              int32
	rate, limit        *int32
	// The codes of a chunk, rate and limit not positive.
	chunkCode, rateCode, limitCode runledger.Code
}

// check refuses, before any database work (exit 2), anything but exactly
// one selection (--from, or a filter with its required flag) and a
// --chunk, --rate or --limit that is not positive; the library reads 0
// as "the default", the command line wants them positive or left out. It
// returns the rate and limit (0 when not given).
func (f bulkFlags) check() (rate, limit int, err error) {
	name := strings.Fields(f.filter)[0]
	switch {
	case f.fromSet && f.filterSet:
		return 0, 0, usageErrorf("%s: --from and %s are two selections; give exactly one: --from FILE or a filter (%s ...)", f.cmd, name, f.filter)
	case f.fromSet && len(f.filterOnly) > 0:
		return 0, 0, usageErrorf("%s: %s belongs to a filter (%s) and cannot be combined with --from", f.cmd, strings.Join(f.filterOnly, ", "), f.filter)
	case !f.fromSet && !f.filterSet && len(f.filterOnly) > 0:
		return 0, 0, usageErrorf("%s: a filter needs %s (%s given without it)", f.cmd, f.filter, strings.Join(f.filterOnly, ", "))
	case !f.fromSet && !f.filterSet:
		return 0, 0, usageErrorf("%s: missing selection: give --from FILE (- for stdin) or a filter %s", f.cmd, f.filter)
	}
	if f.chunk < 1 {
		return 0, 0, bulkInvalid(f.chunkCode, "%s: --chunk must be a positive number of sources per transaction, got %d", f.cmd, f.chunk)
	}
	if f.rate != nil {
		if *f.rate < 1 {
			return 0, 0, bulkInvalid(f.rateCode, "%s: --rate must be a positive number of %s per second, got %d (leave it out for no limit)", f.cmd, f.what, *f.rate)
		}
		rate = int(*f.rate)
	}
	if f.filterSet && f.limit != nil {
		if *f.limit < 1 {
			return 0, 0, bulkInvalid(f.limitCode, "%s: --limit must be a positive number of jobs, got %d (leave it out for no limit)", f.cmd, *f.limit)
		}
		limit = int(*f.limit)
	}
	return rate, limit, nil
}

// bulkSelection is what the runner needs to know of a request's selection.
type bulkSelection struct {
	// listed is the number of sources of a checked --from list, -1 for a
	// filter.
	listed int
	// openEnded is a filter without an upper bound: an interrupted run
	// resumes with the bound it pinned.
	openEnded bool
}

// bulkCall is one bulk action of the library as the runner drives it: C
// is the library's chunk report, S its summary.
type bulkCall[C, S any] struct {
	kind   bulkKind
	dryRun bool
	sel    bulkSelection
	// prepare hands the request what the runner decides: whether a filter
	// counts its selection first (count), and the channel whose closing
	// stops the action after the chunk in flight.
	prepare func(count bool, stop <-chan struct{})
	// act calls the library with the request, reporting each chunk.
	act func(ctx context.Context, onChunk func(C) error) (S, error)
	// progress is a chunk as the runner shows it.
	progress func(C) bulkProgress
	// details prints a chunk's --details lines (JSON lines when asJSON);
	// nil without --details.
	details func(w io.Writer, asJSON bool, c C)
}

// runBulk runs a bulk action with the shared runner: details on stdout,
// progress on stderr, interrupts. It returns the library's summary and the
// runner, which knows the chunks and the elapsed time.
func runBulk[C, S any](ctx context.Context, inv *invocation, b bulkCall[C, S]) (S, *bulkRunner, error) {
	r := newBulkRunner(inv, b.kind, b.dryRun)
	count := false
	if b.sel.listed >= 0 {
		r.setTotal(b.sel.listed)
		r.fromStdin = isStdin(inv.argv)
	} else {
		r.openEnded = b.sel.openEnded
		count = r.wantsCount()
	}
	b.prepare(count, r.stop())
	var sum S
	err := r.run(ctx, func(ctx context.Context) error {
		var err error
		sum, err = b.act(ctx, func(c C) error {
			var show func(io.Writer, bool)
			if b.details != nil {
				show = func(w io.Writer, asJSON bool) { b.details(w, asJSON, c) }
			}
			return r.chunk(b.progress(c), show)
		})
		return err
	})
	return sum, r, err
}

// bulkSummary is the text form of a bulk command's summary.
type bulkSummary struct {
	kind bulkKind
	// action is the verb ("replay"); unit what is selected ("source");
	// scope the request's key and reason as the head line names them.
	action, unit, scope string
	// existing says what the second accepted outcome means ("already
	// replayed under this key").
	existing                  string
	dryRun                    bool
	selected, refused, chunks int
	counts                    []int
	elapsed                   time.Duration
}

func (s bulkSummary) text(w io.Writer) {
	head := "Bulk " + s.action
	if s.dryRun {
		head += ", dry run (every chunk rolled back, nothing written)"
	}
	fmt.Fprintf(w, "%s%s: %s selected, %s in %s", head, s.scope, count(s.selected, s.unit), count(s.chunks, "chunk"), roundDuration(s.elapsed))
	if s.selected > 0 && s.elapsed > 0 {
		fmt.Fprintf(w, " (%s %ss/s)", groupDigits(perSecond(s.selected, s.elapsed)), s.unit)
	}
	fmt.Fprintln(w, ".")
	writeBulkCounts(w, s.kind.outcomes, s.counts, s.selected)
	verb := "are " + s.action + "ed"
	if s.dryRun {
		verb = "would be " + s.action + "ed"
	}
	switch {
	case s.selected == 0:
		fmt.Fprintf(w, "No %s selected: nothing to %s.\n", s.unit, s.action)
	case s.refused == 0:
		fmt.Fprintf(w, "All %s %s: %s %s now, %s %s.\n", count(s.selected, s.unit), verb,
			groupDigits(s.counts[0]), s.kind.outcomes[0], groupDigits(s.counts[1]), s.existing)
	default:
		fmt.Fprintf(w, "%s of %s refused (exit %d; --details lists them); the other %s %s.\n",
			groupDigits(s.refused), count(s.selected, s.unit), exitRefused, groupDigits(s.counts[0]+s.counts[1]), verb)
	}
}

// checkRange refuses a time range [since, until) that selects nothing.
func checkRange(cmd string, code runledger.Code, sinceFlag, untilFlag string, since, until *time.Time) error {
	if since != nil && until != nil && !since.Before(*until) {
		return bulkInvalid(code, "%s: %s %s is not before %s %s: the range [since, until) selects nothing",
			cmd, sinceFlag, since.Format(time.RFC3339Nano), untilFlag, until.Format(time.RFC3339Nano))
	}
	return nil
}

// openFrom opens and checks the --from list of a bulk command.
func openFrom[S any](ctx context.Context, cmd string, syn listSyntax[S], from string, stdin io.Reader, maxBytes int64) (*sourceList[S], error) {
	if from == "" {
		return nil, invalidArgf("%s: --from needs a file name, or - for stdin", cmd)
	}
	return openSourceList(ctx, syn, from, stdin, maxBytes)
}
