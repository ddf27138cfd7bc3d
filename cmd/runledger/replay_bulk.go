package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/replay"
)

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

// replayBulk is replay-bulk to the shared bulk runner: its outcomes in
// summary order (inserted and existing are successes) and the flag that
// pins a filter's upper bound.
var replayBulk = bulkKind{
	cmd: "replay-bulk",
	outcomes: []string{string(replay.BulkInserted), string(replay.BulkExisting), string(replay.BulkConflict),
		string(replay.BulkMismatch), string(replay.BulkNotFound), string(replay.BulkWorkflowManaged),
		string(replay.BulkDefinitionUnavailable)},
	accepted:  2,
	untilFlag: "--succeeded-until",
}

// replaySources is the syntax of replay-bulk's --from lines: "UUID RUN".
var replaySources = listSyntax[replay.Source]{
	cmd: "replay-bulk", minLine: 35, // 32 hex digits, a blank, a digit and the newline
	parse: func(f []string) (replay.Source, uuid.UUID, string) {
		if len(f) != 2 {
			return replay.Source{}, uuid.UUID{}, fmt.Sprintf("want \"UUID RUN\" separated by white space, got %s", clip(strings.Join(f, " ")))
		}
		id, err := uuid.Parse(f[0])
		if err != nil {
			return replay.Source{}, uuid.UUID{}, fmt.Sprintf("%s is not a UUID", clip(f[0]))
		}
		run, err := strconv.ParseInt(f[1], 10, 32)
		if err != nil || run < 1 {
			return replay.Source{}, uuid.UUID{}, fmt.Sprintf("run %s is not a positive integer", clip(f[1]))
		}
		return replay.Source{JobID: id, ExpectedRunNumber: int32(run)}, id, ""
	},
	duplicate: codeBulkDuplicate, empty: codeBulkSourcesEmpty,
	once: "an action replays each job at most once",
}

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
                when the source is locked. Without --succeeded-until the
                action pins it to the database's time at its start: jobs
                that succeed while it runs are not selected. A filter that
                matches nothing is not an error: a summary of zero, exit 0.
The whole --from input is read and checked before any database work: a
malformed line (the message names its line number), a duplicate job, an
empty or unreadable file exits 2 and nothing is written. The list is not
held in memory: it is checked in two passes (stdin is first copied to a
temporary file) and read a chunk at a time as the action goes.

The work goes in chunks of --chunk sources, each one transaction that
commits on its own; no lock is held across chunks. Running the same command
again is idempotent: what this key and reason already replayed is reported
"existing" and only what is missing is replayed. So an action stopped by an
error or by Ctrl-C is resumed by running the same command again (for a
filter without --succeeded-until, with the bound it pinned, which the
resume command shows). Ctrl-C lets the current chunk commit, then stops
and prints the command that resumes; a second Ctrl-C stops at once (the
open chunk rolls back).

--rate N inserts at most N replays per second, to throttle what goes back on
the queue: never more than one chunk at once, and sources found existing
or refused take nothing. --dry-run runs every chunk and rolls it back: the
counts say what would happen, nothing is written.

While it runs, stderr shows a progress bar (done/total, rate, ETA) when it
is a terminal and --json is not given, else one line per chunk (without
--json). For a filter, only the bar counts the selection first (in the
first chunk's transaction), which reads every selected job. At the end
stdout gets a summary. With --json it is one line, the last on stdout:
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
		maxInput := maxInputBytesFlag(fs)
		return func(ctx context.Context, inv *invocation) (result, error) {
			a := bulkArgs{
				key: *key, reason: *reason,
				from: *from, fromSet: fs.isSet("from"),
				jobType: *jobType, typeSet: fs.isSet("type"),
				org: *org, since: *since, until: *until, limit: *limit,
				chunk: *chunk, rate: *rate, dryRun: *dryRun, maxInput: *maxInput,
			}
			req, list, err := a.request(ctx, inv.stdin)
			if err != nil {
				return nil, err
			}
			if list != nil {
				defer list.Close()
			}
			return validatedCall(ctx, inv, req, func(ctx context.Context, pool *pgxpool.Pool, req replay.BulkRequest) (result, error) {
				return runReplayBulk(ctx, inv, pool, req, list, *details)
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
	maxInput     int64 // --max-input-bytes
}

// request checks the flags and the whole --from list, and returns the
// request (a list's sources are streamed from the returned list, which the
// caller closes), or a validation error (exit 2) before any database work.
// The caller still runs the request's own Validate, before connecting.
func (a bulkArgs) request(ctx context.Context, stdin io.Reader) (replay.BulkRequest, *sourceList[replay.Source], error) {
	req := replay.BulkRequest{
		Scope: scopeFor(a.org), Key: a.key, Reason: a.reason,
		ChunkSize: int(a.chunk), DryRun: a.dryRun,
	}
	if err := (replay.Request{Key: a.key, Reason: a.reason}).Validate(); err != nil {
		return req, nil, err
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
	rate, limit, err := bulkFlags{cmd: "replay-bulk", filter: "--type T", what: "replays",
		fromSet: a.fromSet, filterSet: a.typeSet, filterOnly: filterOnly, chunk: a.chunk, rate: a.rate, limit: a.limit,
		chunkCode: codeBulkChunk, rateCode: codeBulkRate, limitCode: codeBulkLimit}.check()
	if err != nil {
		return req, nil, err
	}
	req.Rate = rate
	if a.typeSet {
		if strings.TrimSpace(a.jobType) == "" {
			return req, nil, bulkInvalid(codeJobTypeBlank, "replay-bulk: --type must not be blank")
		}
		if err := checkRange("replay-bulk", codeBulkRange, "--succeeded-since", "--succeeded-until", a.since, a.until); err != nil {
			return req, nil, err
		}
		req.Filter = &replay.Filter{JobType: a.jobType, SucceededSince: a.since, SucceededUntil: a.until, Limit: limit}
		return req, nil, nil
	}
	list, err := openFrom(ctx, "replay-bulk", replaySources, a.from, stdin, a.maxInput)
	if err != nil {
		return req, nil, err
	}
	req.Stream = list.All()
	return req, list, nil
}

// runReplayBulk runs the action with the shared bulk runner and returns
// the summary. list is the checked --from list the request streams (nil
// for a filter).
func runReplayBulk(ctx context.Context, inv *invocation, pool *pgxpool.Pool, req replay.BulkRequest, list *sourceList[replay.Source], details bool) (result, error) {
	sel := bulkSelection{listed: -1}
	if list != nil {
		sel.listed = list.Len()
	} else {
		sel.openEnded = req.Filter.SucceededUntil == nil
	}
	call := bulkCall[replay.BulkChunk, replay.BulkSummary]{
		kind: replayBulk, dryRun: req.DryRun, sel: sel,
		prepare: func(count bool, stop <-chan struct{}) {
			if req.Filter != nil {
				req.Count = count
			}
			req.Stop = stop
		},
		act: func(ctx context.Context, onChunk func(replay.BulkChunk) error) (replay.BulkSummary, error) {
			return replay.Bulk(ctx, pool, req, onChunk)
		},
		progress: progressOf,
	}
	if details {
		call.details = func(w io.Writer, asJSON bool, c replay.BulkChunk) { writeBulkDetails(w, asJSON, c.Results) }
	}
	sum, r, err := runBulk(ctx, inv, call)
	if err != nil {
		return nil, err
	}
	return newBulkOutput(req, sum, r.chunks, r.elapsed()), nil
}

// progressOf is a replay chunk as the bulk runner shows it.
func progressOf(c replay.BulkChunk) bulkProgress {
	var chunk replay.BulkSummary
	for _, res := range c.Results {
		switch res.Result {
		case replay.BulkInserted:
			chunk.Inserted++
		case replay.BulkExisting:
			chunk.Existing++
		case replay.BulkConflict:
			chunk.Conflict++
		case replay.BulkMismatch:
			chunk.Mismatch++
		case replay.BulkNotFound:
			chunk.NotFound++
		case replay.BulkWorkflowManaged:
			chunk.WorkflowManaged++
		case replay.BulkDefinitionUnavailable:
			chunk.DefinitionUnavailable++
		}
	}
	return bulkProgress{index: c.Index, attempts: c.Attempts, counts: replayCounts(chunk), total: replayCounts(c.Total),
		done: c.Total.Selected, expected: c.Expected, until: c.SucceededUntil}
}

// replayCounts is a summary's counts in the order of replayBulk.outcomes.
func replayCounts(s replay.BulkSummary) []int {
	return []int{s.Inserted, s.Existing, s.Conflict, s.Mismatch, s.NotFound, s.WorkflowManaged, s.DefinitionUnavailable}
}

// writeBulkDetails prints one --details line per result.
func writeBulkDetails(w io.Writer, asJSON bool, results []replay.BulkResult) {
	for _, res := range results {
		if asJSON {
			writeJSON(w, bulkDetail{SourceJobID: res.SourceJobID, SourceRunNumber: res.SourceRunNumber, Result: res.Result, ReplayJobID: res.ReplayJobID})
		} else {
			writeBulkDetail(w, res)
		}
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
	bulkSummary{
		kind: replayBulk, action: "replay", unit: "source",
		scope:    fmt.Sprintf(" under key %s, reason %s", strconv.Quote(o.key), strconv.Quote(o.reason)),
		existing: "already replayed under this key",
		dryRun:   o.DryRun, selected: o.Selected, refused: o.refused(), chunks: o.chunks, elapsed: o.elapsed,
		counts: replayCounts(replay.BulkSummary{
			Inserted: o.Inserted, Existing: o.Existing, Conflict: o.Conflict, Mismatch: o.Mismatch,
			NotFound: o.NotFound, WorkflowManaged: o.WorkflowManaged, DefinitionUnavailable: o.DefinitionUnavailable,
		}),
	}.text(w)
}
