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
	"github.com/runledger-go/runledger/requeue"
)

// The validation codes requeue-bulk shares with requeue.BulkRequest.Validate,
// for flag values it refuses with a message naming the flag.
const (
	codeRequeueBulkSourcesEmpty runledger.Code = "job.requeue_bulk_sources_empty"
	codeRequeueBulkDuplicate    runledger.Code = "job.requeue_bulk_duplicate_source"
	codeRequeueBulkRange        runledger.Code = "job.requeue_bulk_range_invalid"
	codeRequeueBulkLimit        runledger.Code = "job.requeue_bulk_limit_invalid"
	codeRequeueBulkChunk        runledger.Code = "job.requeue_bulk_chunk_invalid"
	codeRequeueBulkRate         runledger.Code = "job.requeue_bulk_rate_invalid"
)

// requeueBulk is requeue-bulk to the shared bulk runner: its outcomes in
// summary order (requeued and existing are successes) and the flag that
// pins a filter's upper bound.
var requeueBulk = bulkKind{
	cmd:       "requeue-bulk",
	outcomes:  requeueOutcomeNames(),
	accepted:  2,
	untilFlag: "--finished-until",
}

func requeueOutcomeNames() []string {
	names := make([]string, len(requeue.BulkOutcomes))
	for i, o := range requeue.BulkOutcomes {
		names[i] = string(o)
	}
	return names
}

// requeueSources is the syntax of requeue-bulk's --from lines:
// "UUID STATUS RUN".
var requeueSources = listSyntax[requeue.Source]{
	cmd: "requeue-bulk", minLine: 41, // 32 hex digits, "CANCELED", a digit, two blanks and the newline
	parse: func(f []string) (requeue.Source, uuid.UUID, string) {
		if len(f) != 3 {
			return requeue.Source{}, uuid.UUID{}, fmt.Sprintf("want \"UUID STATUS RUN\" separated by white space, got %s", clip(strings.Join(f, " ")))
		}
		id, err := uuid.Parse(f[0])
		if err != nil {
			return requeue.Source{}, uuid.UUID{}, fmt.Sprintf("%s is not a UUID", clip(f[0]))
		}
		st, err := requeue.ParseStatus(strings.ToUpper(f[1]))
		if err != nil {
			return requeue.Source{}, uuid.UUID{}, fmt.Sprintf("status %s is not DEAD_LETTERED or CANCELED (a SUCCEEDED job is replayed, not requeued)", clip(f[1]))
		}
		run, err := strconv.ParseInt(f[2], 10, 32)
		if err != nil || run < 1 {
			return requeue.Source{}, uuid.UUID{}, fmt.Sprintf("run %s is not a positive integer", clip(f[2]))
		}
		return requeue.Source{JobID: id, ExpectedStatus: st, ExpectedRunNumber: int32(run)}, id, ""
	},
	duplicate: codeRequeueBulkDuplicate, empty: codeRequeueBulkSourcesEmpty,
	once: "an action requeues each job at most once",
}

var requeueBulkCmd = &command{
	name:    "requeue-bulk",
	summary: "Requeue many dead-lettered or canceled jobs in one idempotent, resumable action, by list or by filter.",
	help: `Runs compare-and-requeue (see 'runledger help requeue') on every selected
job, with one reason R for the whole action. Each job gets exactly the
single requeue's semantics: it is requeued in place (run N+1, PENDING) only
if it is in the caller's scope (--org), in the expected status at the
expected run, not workflow-managed and, when CANCELED, past its canceled
lease; it gets one REQUEUED event.

Exactly one selection:
  --from FILE     one job a line, "UUID STATUS RUN" separated by white space
                  ("-" reads stdin); STATUS is DEAD_LETTERED or CANCELED and
                  RUN the run you saw end in it; blank lines and lines
                  starting with # are skipped.
  --status S      a filter: the jobs of the scope in status S (DEAD_LETTERED
                  or CANCELED), of --type T and with last error --error-code
                  C when given, that finished within [--finished-since,
                  --finished-until), in the order they finished, at most
                  --limit of them; the expected run is the run observed when
                  the job is selected. Without --finished-until the action
                  pins it to the database's time at its start: jobs that
                  finish while it runs (a requeued job failing again among
                  them) are not selected. A filter that matches nothing is
                  not an error: a summary of zero, exit 0.
The whole --from input is read and checked before any database work: a
malformed line (the message names its line number), a duplicate job, an
empty or unreadable file exits 2 and nothing is written. The list is
streamed, a chunk at a time, as for replay-bulk.

The work goes in chunks of --chunk jobs, each one transaction that commits
on its own; no lock is held across chunks. Running the same command again
is idempotent: what this reason already requeued (by list) is reported
"existing", and a filter no longer selects it; only what is missing is
requeued. So an action stopped by an error or by Ctrl-C is resumed by
running the same command again (for a filter without --finished-until, with
the bound it pinned, which the resume command shows). Ctrl-C lets the
current chunk commit, then stops and prints the command that resumes; a
second Ctrl-C stops at once (the open chunk rolls back).

--rate N requeues at most N jobs per second, to throttle what goes back on
the queue; --dry-run runs every chunk and rolls it back; --reset-progress
clears every job's progress and checkpoint (default: keep them).

While it runs, stderr shows a progress bar when it is a terminal and --json
is not given, else one line per chunk (without --json). At the end stdout
gets a summary. With --json it is one line, the last on stdout:
  {"outcome":"bulk_requeue","dry_run":false,"selected":N,"requeued":N,"existing":N,
   "mismatch":N,"not_found":N,"workflow_managed":N,"not_quiesced":N}
--details adds one line per job before it, in the order processed; with
--json one object each:
  {"job_id":"...","run_number":N,"result":"requeued"|"existing"|"mismatch"|
   "not_found"|"workflow_managed"|"not_quiesced"}
(run_number is the run requeued or refused: the expected one.)

Exit codes: 0 every selected job ended requeued or existing (none selected
included); 6 at least one was refused (the others are requeued); 2 usage
or validation error, nothing written (a missing --reason, both or neither
selection, a bad --status, a bad --from line, a duplicate job,
--finished-since not before --finished-until, --limit, --chunk or --rate
not positive); 1 other errors, including an interrupt: chunks committed
before stay, and running the same command again resumes.`,
	setup: func(fs *flagSet) runFunc {
		reason := fs.str("reason", "`R`: why the jobs are requeued, recorded as each job's status reason and in its REQUEUED event (at most 4096 bytes); a rerun must repeat it exactly.")
		fs.requireFlag("reason")
		from := fs.str("from", "`FILE`: select the jobs listed in FILE, one \"UUID STATUS RUN\" a line; - reads stdin. Blank lines and lines starting with # are skipped.")
		status := fs.str("status", "`S`: select by filter: the jobs in status S, DEAD_LETTERED or CANCELED. Required for a filter.")
		jobType := fs.str("type", "`T`: filter: only jobs of type T.")
		errorCode := fs.str("error-code", "`C`: filter: only jobs whose last error code is C.")
		org := fs.uuidFlag("org", "`UUID`: the caller's organization (tenant), for both selections. Default: global scope. Only jobs of exactly this scope are requeued; a listed job of another scope is not_found.")
		since := fs.timeOpt("finished-since", "`TIME`: filter: jobs that finished at or after TIME (RFC 3339, such as 2026-11-30T09:00:00Z).")
		until := fs.timeOpt("finished-until", "`TIME`: filter: jobs that finished before TIME (RFC 3339); must be after --finished-since.")
		limit := fs.int32Opt("limit", "`N`: filter: select at most N jobs. Default: no limit.")
		chunk := fs.intDefault("chunk", int32(requeue.DefaultBulkChunk), "`N`: jobs per transaction (default 1000).")
		rate := fs.int32Opt("rate", "`N`: requeue at most N jobs per second. Default: no limit.")
		dryRun := fs.boolean("dry-run", false, "Run every chunk and roll it back: report what would happen, write nothing.")
		details := fs.boolean("details", false, "Also print one line per job, before the summary (with --json: one JSON object per job).")
		reset := fs.boolean("reset-progress", false, "Clear every job's progress and checkpoint. Default: keep them.")
		maxInput := maxInputBytesFlag(fs)
		return func(ctx context.Context, inv *invocation) (result, error) {
			req := requeue.BulkRequest{Scope: scopeFor(*org), Reason: *reason, StatePolicy: statePolicy(*reset),
				ChunkSize: int(*chunk), DryRun: *dryRun}
			if err := (requeue.Request{ExpectedStatus: requeue.DeadLettered, StatePolicy: req.StatePolicy, Reason: *reason}).Validate(); err != nil {
				return nil, err
			}
			var filterOnly []string
			for _, name := range []string{"type", "error-code", "finished-since", "finished-until", "limit"} {
				if fs.isSet(name) {
					filterOnly = append(filterOnly, "--"+name)
				}
			}
			rateN, limitN, err := bulkFlags{cmd: "requeue-bulk", filter: "--status S", what: "jobs",
				fromSet: fs.isSet("from"), filterSet: fs.isSet("status"), filterOnly: filterOnly, chunk: *chunk, rate: *rate, limit: *limit,
				chunkCode: codeRequeueBulkChunk, rateCode: codeRequeueBulkRate, limitCode: codeRequeueBulkLimit}.check()
			if err != nil {
				return nil, err
			}
			req.Rate = rateN
			var list *sourceList[requeue.Source]
			if fs.isSet("status") {
				st, err := requeueStatus("requeue-bulk", *status)
				if err != nil {
					return nil, err
				}
				if fs.isSet("type") && strings.TrimSpace(*jobType) == "" {
					return nil, bulkInvalid(codeJobTypeBlank, "requeue-bulk: --type must not be blank")
				}
				if fs.isSet("error-code") && strings.TrimSpace(*errorCode) == "" {
					return nil, bulkInvalid("job.requeue_bulk_error_code_invalid", "requeue-bulk: --error-code must not be blank")
				}
				if err := checkRange("requeue-bulk", codeRequeueBulkRange, "--finished-since", "--finished-until", *since, *until); err != nil {
					return nil, err
				}
				req.Filter = &requeue.Filter{Status: st, JobType: *jobType, ErrorCode: *errorCode, FinishedSince: *since, FinishedUntil: *until, Limit: limitN}
			} else {
				if list, err = openFrom(ctx, "requeue-bulk", requeueSources, *from, inv.stdin, *maxInput); err != nil {
					return nil, err
				}
				defer list.Close()
				req.Stream = list.All()
			}
			return validatedCall(ctx, inv, req, func(ctx context.Context, pool *pgxpool.Pool, req requeue.BulkRequest) (result, error) {
				return runRequeueBulk(ctx, inv, pool, req, list, *details)
			})
		}
	},
}

// runRequeueBulk runs the action with the shared bulk runner, as
// runReplayBulk does, and returns the summary.
func runRequeueBulk(ctx context.Context, inv *invocation, pool *pgxpool.Pool, req requeue.BulkRequest, list *sourceList[requeue.Source], details bool) (result, error) {
	sel := bulkSelection{listed: -1}
	if list != nil {
		sel.listed = list.Len()
	} else {
		sel.openEnded = req.Filter.FinishedUntil == nil
	}
	call := bulkCall[requeue.BulkChunk, requeue.BulkSummary]{
		kind: requeueBulk, dryRun: req.DryRun, sel: sel,
		prepare: func(count bool, stop <-chan struct{}) {
			if req.Filter != nil {
				req.Count = count
			}
			req.Stop = stop
		},
		act: func(ctx context.Context, onChunk func(requeue.BulkChunk) error) (requeue.BulkSummary, error) {
			return requeue.Bulk(ctx, pool, req, onChunk)
		},
		progress: func(c requeue.BulkChunk) bulkProgress {
			return bulkProgress{index: c.Index, attempts: c.Attempts, counts: c.Counts, total: c.Total.Counts(),
				done: c.Total.Selected, expected: c.Expected, until: c.FinishedUntil}
		},
	}
	if details {
		call.details = func(w io.Writer, asJSON bool, c requeue.BulkChunk) { writeRequeueDetails(w, asJSON, c.Results) }
	}
	sum, r, err := runBulk(ctx, inv, call)
	if err != nil {
		return nil, err
	}
	return requeueBulkOutput{Outcome: "bulk_requeue", DryRun: req.DryRun, Selected: sum.Selected, Requeued: sum.Requeued,
		Existing: sum.Existing, Mismatch: sum.Mismatch, NotFound: sum.NotFound, WorkflowManaged: sum.WorkflowManaged,
		NotQuiesced: sum.NotQuiesced, reason: req.Reason, chunks: r.chunks, elapsed: r.elapsed()}, nil
}

// requeueDetail is one --details --json line.
type requeueDetail struct {
	JobID     uuid.UUID           `json:"job_id"`
	RunNumber int32               `json:"run_number"`
	Result    requeue.BulkOutcome `json:"result"`
}

// writeRequeueDetails prints one --details line per result.
func writeRequeueDetails(w io.Writer, asJSON bool, results []requeue.BulkResult) {
	for _, res := range results {
		if asJSON {
			writeJSON(w, requeueDetail{JobID: res.JobID, RunNumber: res.RunNumber, Result: res.Result})
		} else {
			fmt.Fprintf(w, "%-22s  job %s run %d\n", res.Result, res.JobID, res.RunNumber)
		}
	}
}

// requeueBulkOutput is the summary requeue-bulk prints last; with --json
// its fields are exactly the contract's, in this order.
type requeueBulkOutput struct {
	Outcome         string `json:"outcome"`
	DryRun          bool   `json:"dry_run"`
	Selected        int    `json:"selected"`
	Requeued        int    `json:"requeued"`
	Existing        int    `json:"existing"`
	Mismatch        int    `json:"mismatch"`
	NotFound        int    `json:"not_found"`
	WorkflowManaged int    `json:"workflow_managed"`
	NotQuiesced     int    `json:"not_quiesced"`

	reason  string
	chunks  int
	elapsed time.Duration
}

func (o requeueBulkOutput) counts() []int {
	return []int{o.Requeued, o.Existing, o.Mismatch, o.NotFound, o.WorkflowManaged, o.NotQuiesced}
}

// refused is the number of selected jobs not requeued.
func (o requeueBulkOutput) refused() int { return o.Selected - o.Requeued - o.Existing }

func (o requeueBulkOutput) exitCode() int {
	if o.refused() > 0 {
		return exitRefused
	}
	return exitOK
}

func (o requeueBulkOutput) text(w io.Writer) {
	bulkSummary{
		kind: requeueBulk, action: "requeue", unit: "job",
		scope:    ", reason " + strconv.Quote(o.reason),
		existing: "already requeued with this reason",
		dryRun:   o.DryRun, selected: o.Selected, refused: o.refused(), chunks: o.chunks, elapsed: o.elapsed,
		counts: o.counts(),
	}.text(w)
}
