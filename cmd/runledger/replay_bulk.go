package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/internal/errs"
	"github.com/runledger-go/runledger/replay"
)

// exitRefused is replay-bulk's exit code when at least one selected source
// was refused (conflict, mismatch, not found, workflow-managed, definition
// unavailable): the others are replayed, those are not.
const exitRefused = 6

// The validation codes replay-bulk shares with replay.BulkRequest.Validate,
// for flag values it refuses with a message naming the flag: the library
// reads a zero chunk size, rate or limit as "the default", the command
// line wants them positive or left out.
const (
	codeBulkSourcesEmpty runledger.Code = "job.replay_bulk_sources_empty"
	codeBulkDuplicate    runledger.Code = "job.replay_bulk_duplicate_source"
	codeBulkRange        runledger.Code = "job.replay_bulk_range_invalid"
	codeBulkLimit        runledger.Code = "job.replay_bulk_limit_invalid"
	codeBulkChunk        runledger.Code = "job.replay_bulk_chunk_invalid"
	codeBulkRate         runledger.Code = "job.replay_bulk_rate_invalid"
	codeJobTypeBlank     runledger.Code = "job.job_type_blank"
)

// bulkInvalid returns a validation error (exit 2) with code.
func bulkInvalid(code runledger.Code, format string, args ...any) error {
	return errs.Validation(code, fmt.Sprintf(format, args...)).New("")
}

// maxSourceLine is the longest --from line accepted, in bytes; a source
// line is about 40.
const maxSourceLine = 64 << 10

var replayBulkCmd = &command{
	name:    "replay-bulk",
	summary: "Replay many succeeded jobs in one idempotent, resumable action, by list or by filter.",
	help: `Runs compare-and-replay (see 'runledger help replay') on every selected
source, with one request key K and one reason R for the whole action. Each
source gets exactly the single replay's semantics: it is replayed only if it
is in the caller's scope (--org), SUCCEEDED at the expected run and not
workflow-managed; the source is never touched; each new job gets one
ENQUEUED event and one lineage row.

Exactly one selection:
  --from FILE   one source a line, "UUID RUN" separated by white space ("-"
                reads stdin); blank lines and lines starting with # are
                skipped. RUN is the run at which you saw the job SUCCEEDED.
  --type T      a filter: the jobs of type T in the scope that finished
                SUCCEEDED within [--succeeded-since, --succeeded-until), in
                the order they finished, at most --limit of them (never the
                replays made under K); the expected run is the run observed
                when the source is locked. A filter that matches nothing
                is not an error: a summary of zero, exit 0.
The whole --from input is read and checked before any database work: a
malformed line (the message names its line number), a duplicate job, an
empty or unreadable file exits 2 and nothing is written.

The work goes in chunks of --chunk sources, each one transaction that
commits on its own; no lock is held across chunks. Running the same command
again is idempotent: what this key and reason already replayed is reported
"existing" and only what is missing is replayed. So an action stopped by an
error or by Ctrl-C is resumed by running the same command again. Ctrl-C
finishes (or rolls back) the current chunk, then prints the command that
resumes; a second Ctrl-C stops at once (the open chunk rolls back).

--rate N inserts at most N replays per second, to throttle what goes back on
the queue. --dry-run runs every chunk and rolls it back: the counts say what
would happen, nothing is written.

While it runs, stderr shows a progress bar (done/total, rate, ETA) when it
is a terminal, else one line per chunk (without --json). At the end stdout
gets a summary. With --json it is one line, the last on stdout:
  {"outcome":"bulk_replay","dry_run":false,"selected":N,"inserted":N,"existing":N,
   "conflict":N,"mismatch":N,"not_found":N,"workflow_managed":N,"definition_unavailable":N}
--details adds one line per source before it, in the order processed; with
--json one object each:
  {"source_job_id":"...","source_run_number":N,"result":"inserted"|"existing"|
   "conflict"|"mismatch"|"not_found"|"workflow_managed"|"definition_unavailable",
   "replay_job_id":"..." (when inserted or existing)}
(source_run_number is the run observed at lock time for a filter.)

Results: inserted (a new replay), existing (already replayed under this key
and reason), and the refusals: conflict (this key was used with another
reason for that source), mismatch (not SUCCEEDED at the expected run),
not_found (no such job in the caller's scope; another tenant's job is
reported the same way), workflow_managed (a workflow step owns the job),
definition_unavailable (its job type is missing or disabled).

Exit codes: 0 every selected source ended inserted or existing (none
selected included); 6 at least one was refused (the others are replayed);
2 usage or validation error, nothing written (missing --key or --reason,
both or neither selection, --type missing for a filter, a bad --from line,
a duplicate source, --succeeded-since not before --succeeded-until,
--limit, --chunk or --rate not positive); 1 other errors, including an
interrupt: chunks committed before stay, and running the same command again
resumes.`,
	setup: func(fs *flagSet) runFunc {
		key := fs.str("key", "`K`: the request key of the whole action, the same for every source (at most 512 bytes). Running the action again with the same key and reason resumes it.")
		fs.requireFlag("key")
		reason := fs.str("reason", "`R`: why the jobs are replayed, recorded in every lineage row and ENQUEUED event (at most 4096 bytes); a rerun must repeat it exactly.")
		fs.requireFlag("reason")
		from := fs.str("from", "`FILE`: select the sources listed in FILE, one \"UUID RUN\" a line; - reads stdin. Blank lines and lines starting with # are skipped.")
		jobType := fs.str("type", "`T`: select by filter: the SUCCEEDED jobs of type T in the scope. Required for a filter.")
		org := fs.uuidFlag("org", "`UUID`: the caller's organization (tenant), for both selections. Default: global scope. Only jobs of exactly this scope are replayed; a listed job of another scope is not_found.")
		since := fs.timeOpt("succeeded-since", "`TIME`: filter: jobs that finished SUCCEEDED at or after TIME (RFC 3339, such as 2026-11-30T09:00:00Z).")
		until := fs.timeOpt("succeeded-until", "`TIME`: filter: jobs that finished SUCCEEDED before TIME (RFC 3339); must be after --succeeded-since.")
		limit := fs.int32Opt("limit", "`N`: filter: select at most N jobs. Default: no limit.")
		chunk := fs.intDefault("chunk", int32(replay.DefaultBulkChunk), "`N`: sources per transaction (default 1000).")
		rate := fs.int32Opt("rate", "`N`: insert at most N replays per second. Default: no limit.")
		dryRun := fs.boolean("dry-run", false, "Run every chunk and roll it back: report what would happen, write nothing.")
		details := fs.boolean("details", false, "Also print one line per source, before the summary (with --json: one JSON object per source).")
		return func(ctx context.Context, inv *invocation) (result, error) {
			a := bulkArgs{
				key: *key, reason: *reason,
				from: *from, fromSet: fs.isSet("from"),
				jobType: *jobType, typeSet: fs.isSet("type"),
				org: *org, since: *since, until: *until, limit: *limit,
				chunk: *chunk, rate: *rate, dryRun: *dryRun,
			}
			req, err := a.request(inv.stdin)
			if err != nil {
				return nil, err
			}
			return validatedCall(ctx, inv, req, func(ctx context.Context, pool *pgxpool.Pool, req replay.BulkRequest) (result, error) {
				return runBulk(ctx, inv, pool, req, *details)
			})
		}
	},
}

// bulkArgs are replay-bulk's flags as parsed.
type bulkArgs struct {
	key, reason  string
	from         string
	fromSet      bool
	jobType      string
	typeSet      bool
	org          *uuid.UUID
	since, until *time.Time
	limit        *int32
	chunk        int32
	rate         *int32
	dryRun       bool
}

// request checks the flags and reads the --from list, and returns the
// request, or a validation error (exit 2) before any database work. The
// caller still runs the request's own Validate, before connecting.
func (a bulkArgs) request(stdin io.Reader) (replay.BulkRequest, error) {
	req := replay.BulkRequest{
		Scope: scopeFor(a.org), Key: a.key, Reason: a.reason,
		ChunkSize: int(a.chunk), DryRun: a.dryRun,
	}
	if err := (replay.Request{Key: a.key, Reason: a.reason}).Validate(); err != nil {
		return req, err
	}
	var filterOnly []string
	if a.since != nil {
		filterOnly = append(filterOnly, "--succeeded-since")
	}
	if a.until != nil {
		filterOnly = append(filterOnly, "--succeeded-until")
	}
	if a.limit != nil {
		filterOnly = append(filterOnly, "--limit")
	}
	switch {
	case a.fromSet && a.typeSet:
		return req, usageErrorf("replay-bulk: --from and --type are two selections; give exactly one: --from FILE or a filter (--type T ...)")
	case a.fromSet && len(filterOnly) > 0:
		return req, usageErrorf("replay-bulk: %s belongs to a filter (--type T) and cannot be combined with --from", strings.Join(filterOnly, ", "))
	case !a.fromSet && !a.typeSet && len(filterOnly) > 0:
		return req, usageErrorf("replay-bulk: a filter needs --type T (%s given without it)", strings.Join(filterOnly, ", "))
	case !a.fromSet && !a.typeSet:
		return req, usageErrorf("replay-bulk: missing selection: give --from FILE (- for stdin) or a filter --type T")
	}
	if a.chunk < 1 {
		return req, bulkInvalid(codeBulkChunk, "replay-bulk: --chunk must be a positive number of sources per transaction, got %d", a.chunk)
	}
	if a.rate != nil {
		if *a.rate < 1 {
			return req, bulkInvalid(codeBulkRate, "replay-bulk: --rate must be a positive number of replays per second, got %d (leave it out for no limit)", *a.rate)
		}
		req.Rate = int(*a.rate)
	}
	if a.typeSet {
		if strings.TrimSpace(a.jobType) == "" {
			return req, bulkInvalid(codeJobTypeBlank, "replay-bulk: --type must not be blank")
		}
		if a.limit != nil && *a.limit < 1 {
			return req, bulkInvalid(codeBulkLimit, "replay-bulk: --limit must be a positive number of jobs, got %d (leave it out for no limit)", *a.limit)
		}
		if a.since != nil && a.until != nil && !a.since.Before(*a.until) {
			return req, bulkInvalid(codeBulkRange, "replay-bulk: --succeeded-since %s is not before --succeeded-until %s: the range [since, until) selects nothing",
				a.since.Format(time.RFC3339Nano), a.until.Format(time.RFC3339Nano))
		}
		f := &replay.Filter{JobType: a.jobType, SucceededSince: a.since, SucceededUntil: a.until}
		if a.limit != nil {
			f.Limit = int(*a.limit)
		}
		req.Filter = f
		return req, nil
	}
	if a.from == "" {
		return req, invalidArgf("replay-bulk: --from needs a file name, or - for stdin")
	}
	sources, err := readSourcesFrom(a.from, stdin)
	if err != nil {
		return req, err
	}
	req.Sources = sources
	return req, nil
}

// readSourcesFrom reads the source list from the file at path, or from
// stdin when path is "-".
func readSourcesFrom(path string, stdin io.Reader) ([]replay.Source, error) {
	if path == "-" {
		return readSources(stdin, "stdin")
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, invalidArgf("replay-bulk: cannot read --from %s: %s", path, pathErrorCause(err))
	}
	defer f.Close()
	return readSources(f, path)
}

// pathErrorCause is the reason a file operation failed, without the
// operation and path the message already names.
func pathErrorCause(err error) string {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	return err.Error()
}

// readSources parses a source list: one "UUID RUN" a line, separated by
// white space; blank lines and lines whose first non-blank character is #
// are skipped. RUN must be a positive integer. A job listed twice is an
// error, whatever the runs: one action replays a job at most once. name
// is how messages call the input. Every error is cli.invalid_argument and
// names the line.
func readSources(r io.Reader, name string) ([]replay.Source, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), maxSourceLine)
	seen := map[uuid.UUID]int{}
	var out []replay.Source
	n := 0
	bad := func(format string, args ...any) error {
		return invalidArgf("replay-bulk: --from %s line %d: %s", name, n, fmt.Sprintf(format, args...))
	}
	for sc.Scan() {
		n++
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 2 {
			return nil, bad("want \"UUID RUN\" separated by white space, got %s", clip(line))
		}
		id, err := uuid.Parse(f[0])
		if err != nil {
			return nil, bad("%s is not a UUID", clip(f[0]))
		}
		run, err := strconv.ParseInt(f[1], 10, 32)
		if err != nil || run < 1 {
			return nil, bad("run %s is not a positive integer", clip(f[1]))
		}
		if first, dup := seen[id]; dup {
			return nil, bulkInvalid(codeBulkDuplicate, "replay-bulk: --from %s line %d: duplicate source: job %s is already on line %d (an action replays each job at most once)",
				name, n, id, first)
		}
		seen[id] = n
		out = append(out, replay.Source{JobID: id, ExpectedRunNumber: int32(run)})
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			n++
			return nil, bad("line longer than %d bytes", maxSourceLine)
		}
		return nil, invalidArgf("replay-bulk: cannot read --from %s: %s", name, pathErrorCause(err))
	}
	if len(out) == 0 {
		if n == 0 {
			return nil, bulkInvalid(codeBulkSourcesEmpty, "replay-bulk: --from %s is empty: it lists no sources", name)
		}
		return nil, bulkInvalid(codeBulkSourcesEmpty, "replay-bulk: --from %s is empty: its %s are blank or comments, it lists no sources", name, plural(n, "line"))
	}
	return out, nil
}

// clip quotes s for a message, shortened to about 60 bytes.
func clip(s string) string {
	if len(s) > 60 {
		s = s[:57] + "..."
	}
	return strconv.Quote(s)
}

// runBulk runs the action, streaming details on stdout and progress on
// stderr, and returns the summary.
func runBulk(ctx context.Context, inv *invocation, pool *pgxpool.Pool, req replay.BulkRequest, details bool) (result, error) {
	rep := newBulkReporter(inv, req, details)
	if rep.wantsTotal() {
		total, err := replay.BulkCount(ctx, pool, req)
		if err != nil {
			return nil, rep.failed(ctx, err)
		}
		rep.start(total)
	}
	stopWatching := rep.watchInterrupt(ctx)
	sum, err := replay.Bulk(ctx, pool, req, rep.chunk)
	stopWatching()
	rep.end()
	if err != nil {
		return nil, rep.failed(ctx, err)
	}
	return newBulkOutput(req, sum, rep.chunks, time.Since(rep.began)), nil
}

// bulkReporter shows an action's progress: the details on stdout, a
// progress bar (stderr is a terminal) or a log line per chunk (it is not,
// without --json) on stderr.
type bulkReporter struct {
	inv     *invocation
	req     replay.BulkRequest
	details bool
	out     *bufio.Writer // stdout, flushed after each chunk
	bar     bool          // draw a progress bar on stderr
	log     bool          // print a line per chunk on stderr

	mu     sync.Mutex // stderr
	drawn  bool       // a bar is on the current stderr line
	began  time.Time
	last   time.Time
	total  int
	chunks int
	sum    replay.BulkSummary
}

func newBulkReporter(inv *invocation, req replay.BulkRequest, details bool) *bulkReporter {
	r := &bulkReporter{inv: inv, req: req, details: details, out: bufio.NewWriterSize(inv.stdout, 64<<10), began: time.Now()}
	r.last = r.began
	if isTerminal(inv.stderr) {
		r.bar = true
	} else {
		r.log = !inv.asJSON()
	}
	return r
}

// wantsTotal reports whether progress needs the number of sources.
func (r *bulkReporter) wantsTotal() bool { return r.bar || r.log }

// start records the total and draws the empty bar.
func (r *bulkReporter) start(total int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.total = total
	r.began, r.last = time.Now(), time.Now()
	if r.bar {
		r.draw()
	}
}

// chunk is Bulk's callback: it prints the chunk's details and progress.
func (r *bulkReporter) chunk(c replay.BulkChunk) error {
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	took := now.Sub(r.last)
	r.last = now
	r.chunks++
	r.sum = c.Total
	if r.details && len(c.Results) > 0 {
		r.clearBar()
		for _, res := range c.Results {
			if r.inv.asJSON() {
				writeJSON(r.out, bulkDetail{SourceJobID: res.SourceJobID, SourceRunNumber: res.SourceRunNumber, Result: res.Result, ReplayJobID: res.ReplayJobID})
			} else {
				writeBulkDetail(r.out, res)
			}
		}
		_ = r.out.Flush()
	}
	switch {
	case r.bar:
		r.draw()
	case r.log:
		r.logChunk(c, took)
	}
	return nil
}

// logChunk prints one line for a finished chunk.
func (r *bulkReporter) logChunk(c replay.BulkChunk, took time.Duration) {
	var counts chunkCounts
	for _, res := range c.Results {
		counts.add(res.Result)
	}
	what := "committed"
	if r.req.DryRun {
		what = "rolled back (dry run)"
	}
	done := c.Total.Selected
	fmt.Fprintf(r.inv.stderr, "runledger replay-bulk: chunk %d %s: %s in %s (%s); %s done, %s sources/s\n",
		c.Index+1, what, count(len(c.Results), "source"), roundDuration(took), counts.text(),
		progressCount(done, r.total), groupDigits(perSecond(done, time.Since(r.began))))
}

// draw redraws the progress bar on the current stderr line.
func (r *bulkReporter) draw() {
	done := r.sum.Selected
	total := max(r.total, done)
	const width = 30
	filled := width
	pct := 100
	if total > 0 {
		filled = done * width / total
		pct = done * 100 / total
	}
	elapsed := time.Since(r.began)
	rate := perSecond(done, elapsed)
	eta := "-"
	switch {
	case total == done:
		eta = "0s"
	case rate > 0:
		left := time.Duration(float64(total-done) / float64(rate) * float64(time.Second))
		eta = "<1s"
		if left >= time.Second {
			eta = left.Round(time.Second).String()
		}
	}
	refused := r.sum.Selected - r.sum.Inserted - r.sum.Existing
	line := fmt.Sprintf("replay-bulk [%s%s] %s %3d%%  %s/s  ETA %s", strings.Repeat("#", filled), strings.Repeat(".", width-filled),
		progressCount(done, total), pct, groupDigits(rate), eta)
	if refused > 0 {
		line += fmt.Sprintf("  refused %s", groupDigits(refused))
	}
	if r.req.DryRun {
		line += "  (dry run)"
	}
	fmt.Fprintf(r.inv.stderr, "\r\x1b[K%s", line)
	r.drawn = true
}

// clearBar erases the bar so that other output starts on a clean line.
func (r *bulkReporter) clearBar() {
	if r.drawn {
		fmt.Fprint(r.inv.stderr, "\r\x1b[K")
		r.drawn = false
	}
}

// end leaves the bar's line (the last drawing stays) and flushes stdout.
func (r *bulkReporter) end() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.drawn {
		fmt.Fprintln(r.inv.stderr)
		r.drawn = false
	}
	_ = r.out.Flush()
}

// watchInterrupt says on stderr, when ctx is cancelled (SIGINT, SIGTERM),
// that the current chunk is being finished. The returned function stops
// watching.
func (r *bulkReporter) watchInterrupt(ctx context.Context) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		select {
		case <-done:
		case <-ctx.Done():
			if !r.bar && !r.log {
				return // --json: stderr carries only the final error
			}
			r.mu.Lock()
			r.clearBar()
			fmt.Fprintln(r.inv.stderr, "runledger replay-bulk: interrupted: finishing the current chunk; press Ctrl-C again to stop at once (the open chunk rolls back)")
			r.mu.Unlock()
		}
	}()
	return func() {
		close(done)
		wg.Wait()
	}
}

// failed turns the error that stopped the action into the command's
// error. An interrupt becomes cli.interrupted, naming what was done and
// the command that resumes; for any other error after committed chunks, a
// line before the error (not under --json) says they stay and how to
// resume.
func (r *bulkReporter) failed(ctx context.Context, err error) error {
	resume := resumeCommand(r.inv.argv)
	var notes []string
	if r.req.Sources != nil && isStdin(r.inv.argv) {
		notes = append(notes, "with the same list on stdin")
	}
	if strings.Contains(resume, "xxxxx") && !strings.Contains(strings.Join(r.inv.argv, " "), "xxxxx") {
		notes = append(notes, "the database password is hidden")
	}
	if len(notes) > 0 {
		resume += " (" + strings.Join(notes, "; ") + ")"
	}
	done := "no chunk was committed"
	if r.req.DryRun {
		done = "nothing was written (dry run)"
	} else if r.chunks > 0 {
		c := chunkCounts{r.sum}
		done = fmt.Sprintf("the %s committed before stay (%s: %s)", count(r.chunks, "chunk"), count(r.sum.Selected, "source"), c.text())
	}
	if ctx.Err() != nil {
		return &runledger.Error{
			Code: "cli.interrupted", Category: runledger.CategoryInternal,
			Message: fmt.Sprintf("replay-bulk: interrupted: %s; to resume, run the same command again: %s", done, resume),
			Err:     err,
		}
	}
	if r.chunks > 0 && !r.inv.asJSON() && !r.req.DryRun {
		fmt.Fprintf(r.inv.stderr, "runledger replay-bulk: stopped by the error below; %s; to resume, run the same command again: %s\n", done, resume)
	}
	return err
}

// chunkCounts counts results by outcome.
type chunkCounts struct {
	replay.BulkSummary
}

func (c *chunkCounts) add(o replay.BulkOutcome) {
	c.Selected++
	switch o {
	case replay.BulkInserted:
		c.Inserted++
	case replay.BulkExisting:
		c.Existing++
	case replay.BulkConflict:
		c.Conflict++
	case replay.BulkMismatch:
		c.Mismatch++
	case replay.BulkNotFound:
		c.NotFound++
	case replay.BulkWorkflowManaged:
		c.WorkflowManaged++
	case replay.BulkDefinitionUnavailable:
		c.DefinitionUnavailable++
	}
}

// text lists the outcomes that occurred: "inserted 998, existing 2".
func (c chunkCounts) text() string {
	var parts []string
	for _, o := range bulkOutcomes(c.BulkSummary) {
		if o.n > 0 {
			parts = append(parts, o.name+" "+groupDigits(o.n))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// bulkOutcomes pairs each outcome's name with its count, in the order
// the summary prints them.
func bulkOutcomes(s replay.BulkSummary) []struct {
	name string
	n    int
} {
	return []struct {
		name string
		n    int
	}{
		{string(replay.BulkInserted), s.Inserted},
		{string(replay.BulkExisting), s.Existing},
		{string(replay.BulkConflict), s.Conflict},
		{string(replay.BulkMismatch), s.Mismatch},
		{string(replay.BulkNotFound), s.NotFound},
		{string(replay.BulkWorkflowManaged), s.WorkflowManaged},
		{string(replay.BulkDefinitionUnavailable), s.DefinitionUnavailable},
	}
}

// bulkDetail is one --details --json line.
type bulkDetail struct {
	SourceJobID     uuid.UUID          `json:"source_job_id"`
	SourceRunNumber int32              `json:"source_run_number"`
	Result          replay.BulkOutcome `json:"result"`
	ReplayJobID     *uuid.UUID         `json:"replay_job_id,omitempty"`
}

// writeBulkDetail prints one --details line in text form.
func writeBulkDetail(w io.Writer, res replay.BulkResult) {
	fmt.Fprintf(w, "%-22s  job %s run %d", res.Result, res.SourceJobID, res.SourceRunNumber)
	if res.ReplayJobID != nil {
		fmt.Fprintf(w, "  -> replay %s", *res.ReplayJobID)
	}
	fmt.Fprintln(w)
}

// bulkOutput is the summary replay-bulk prints last; with --json its
// fields are exactly the contract's, in this order.
type bulkOutput struct {
	Outcome               string `json:"outcome"`
	DryRun                bool   `json:"dry_run"`
	Selected              int    `json:"selected"`
	Inserted              int    `json:"inserted"`
	Existing              int    `json:"existing"`
	Conflict              int    `json:"conflict"`
	Mismatch              int    `json:"mismatch"`
	NotFound              int    `json:"not_found"`
	WorkflowManaged       int    `json:"workflow_managed"`
	DefinitionUnavailable int    `json:"definition_unavailable"`

	key, reason string
	chunks      int
	elapsed     time.Duration
}

func newBulkOutput(req replay.BulkRequest, s replay.BulkSummary, chunks int, elapsed time.Duration) bulkOutput {
	return bulkOutput{
		Outcome: "bulk_replay", DryRun: req.DryRun, Selected: s.Selected,
		Inserted: s.Inserted, Existing: s.Existing, Conflict: s.Conflict, Mismatch: s.Mismatch,
		NotFound: s.NotFound, WorkflowManaged: s.WorkflowManaged, DefinitionUnavailable: s.DefinitionUnavailable,
		key: req.Key, reason: req.Reason, chunks: chunks, elapsed: elapsed,
	}
}

// refused is the number of selected sources not replayed.
func (o bulkOutput) refused() int {
	return o.Conflict + o.Mismatch + o.NotFound + o.WorkflowManaged + o.DefinitionUnavailable
}

func (o bulkOutput) exitCode() int {
	if o.refused() > 0 {
		return exitRefused
	}
	return exitOK
}

func (o bulkOutput) text(w io.Writer) {
	head := "Bulk replay"
	if o.DryRun {
		head = "Bulk replay, dry run (every chunk rolled back, nothing written)"
	}
	fmt.Fprintf(w, "%s under key %s, reason %s: %s selected, %s in %s",
		head, strconv.Quote(o.key), strconv.Quote(o.reason), count(o.Selected, "source"), count(o.chunks, "chunk"), roundDuration(o.elapsed))
	if o.Selected > 0 && o.elapsed > 0 {
		fmt.Fprintf(w, " (%s sources/s)", groupDigits(perSecond(o.Selected, o.elapsed)))
	}
	fmt.Fprintln(w, ".")
	counts := bulkOutcomes(replay.BulkSummary{
		Inserted: o.Inserted, Existing: o.Existing, Conflict: o.Conflict, Mismatch: o.Mismatch,
		NotFound: o.NotFound, WorkflowManaged: o.WorkflowManaged, DefinitionUnavailable: o.DefinitionUnavailable,
	})
	width := len(groupDigits(o.Selected))
	for _, c := range counts {
		fmt.Fprintf(w, "  %-22s  %*s\n", c.name, width, groupDigits(c.n))
	}
	verb, existing := "are replayed", "already replayed under this key"
	if o.DryRun {
		verb = "would be replayed"
	}
	switch {
	case o.Selected == 0:
		fmt.Fprintln(w, "No source selected: nothing to replay.")
	case o.refused() == 0:
		fmt.Fprintf(w, "All %s %s: %s inserted now, %s %s.\n", count(o.Selected, "source"), verb,
			groupDigits(o.Inserted), groupDigits(o.Existing), existing)
	default:
		fmt.Fprintf(w, "%s of %s refused (exit %d; --details lists them); the other %s %s.\n",
			groupDigits(o.refused()), count(o.Selected, "source"), exitRefused, groupDigits(o.Inserted+o.Existing), verb)
	}
}

// resumeCommand is the command line that resumes the action: the same
// one, shell-quoted, with a database URL's password hidden.
func resumeCommand(argv []string) string {
	parts := []string{"runledger"}
	redact := false
	for i := 0; i < len(argv); i++ {
		a := argv[i]
		name, val, hasVal := strings.Cut(strings.TrimLeft(a, "-"), "=")
		isURL := strings.HasPrefix(a, "-") && name == "database-url" && !redact
		switch {
		case a == "--":
			for _, rest := range argv[i:] {
				parts = append(parts, shellQuote(rest))
			}
			return strings.Join(parts, " ")
		case isURL && hasVal:
			a = a[:len(a)-len(val)] + redactPassword(val)
		case isURL && i+1 < len(argv):
			parts = append(parts, shellQuote(a))
			i++
			a = redactPassword(argv[i])
		}
		parts = append(parts, shellQuote(a))
	}
	return strings.Join(parts, " ")
}

// isStdin reports whether argv reads the sources from stdin (--from -).
func isStdin(argv []string) bool {
	for i, a := range argv {
		if a == "--" {
			return false
		}
		if a == "--from=-" || a == "-from=-" || ((a == "--from" || a == "-from") && i+1 < len(argv) && argv[i+1] == "-") {
			return true
		}
	}
	return false
}

var dsnPassword = regexp.MustCompile(`(password\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)`)

// redactPassword hides the password of a database URL or keyword/value
// connection string.
func redactPassword(s string) string {
	if u, err := url.Parse(s); err == nil && u.User != nil {
		if _, ok := u.User.Password(); ok {
			return u.Redacted()
		}
		return s
	}
	return dsnPassword.ReplaceAllString(s, "${1}xxxxx")
}

// isTerminal reports whether w is a terminal (a character device).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// perSecond is n per elapsed second, rounded down.
func perSecond(n int, elapsed time.Duration) int {
	if elapsed <= 0 {
		return 0
	}
	return int(float64(n) / elapsed.Seconds())
}

// progressCount is "done/total" with digit groups.
func progressCount(done, total int) string {
	return groupDigits(done) + "/" + groupDigits(max(total, done))
}

// roundDuration rounds d for display: milliseconds under a minute, then
// seconds.
func roundDuration(d time.Duration) time.Duration {
	if d < time.Minute {
		return d.Round(time.Millisecond)
	}
	return d.Round(time.Second)
}

// count is plural with digit groups: "1 source", "2,500 sources".
func count(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return groupDigits(n) + " " + word + "s"
}

// groupDigits prints n with a comma every three digits: 1,000,000.
func groupDigits(n int) string {
	s := strconv.Itoa(n)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	if neg {
		s = "-" + s
	}
	return s
}
