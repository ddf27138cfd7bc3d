package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/health"
)

var statsCmd = &command{
	name:    "stats",
	summary: "Show the queue's health per job type.",
	help: `Shows, per job type, the live queue (exact counts at the database clock):
PENDING jobs due now and scheduled for later, LEASED jobs and how many of
their leases ran out without a recovery yet, and how long the oldest due job
has waited; and over a window of finished jobs (by finished_at, default the
last hour) the SUCCEEDED, DEAD_LETTERED and CANCELED counts with the p50 and
p95 run time (finished_at - started_at) of the jobs that ran. Its cost
follows the live queue and the window, never the history. Without --org it
covers every tenant.

Output (--json):
  {"at":T,"window_seconds":N,"organization_id":UUID|null,
   "types":[{"job_type","pending_due","pending_scheduled","leased",
             "expired_leases","oldest_due_age_seconds":N|null,"succeeded",
             "dead_lettered","canceled","run_time_p50_seconds":N|null,
             "run_time_p95_seconds":N|null}, ...],
   "totals":{the same counts summed; the oldest age of all; no run times}}

Exit codes: 0 done; 2 invalid input; 1 other errors.`,
	setup: func(fs *flagSet) runFunc {
		org := fs.uuidFlag("org", "`UUID`: only this organization (tenant). Default: every tenant.")
		jobType := fs.str("type", "`T`: only this job type. Default: every type.")
		window := fs.duration("window", health.DefaultWindow, "`D`: how far back the finished counts and run times reach, as a Go duration (1h, 15m).")
		return func(ctx context.Context, inv *invocation) (result, error) {
			req := health.StatsRequest{JobType: *jobType, Window: *window}
			if *org != nil {
				req.Scope = &[]runledger.Scope{runledger.Organization(**org)}[0]
			}
			if *window <= 0 {
				return nil, invalidArgf("--window %s must be positive", *window)
			}
			st, err := validatedCall(ctx, inv, req, func(ctx context.Context, pool *pgxpool.Pool, req health.StatsRequest) (health.Stats, error) {
				return health.GetStats(ctx, pool, req)
			})
			if err != nil {
				return nil, err
			}
			return newStatsResult(st, *org), nil
		}
	},
}

// statsResult is the JSON form of health.Stats.
type statsResult struct {
	At             time.Time         `json:"at"`
	WindowSeconds  float64           `json:"window_seconds"`
	OrganizationID *uuid.UUID        `json:"organization_id"`
	Types          []typeStatsResult `json:"types"`
	Totals         countsResult      `json:"totals"`
}

// countsResult is the figures of a type that add up over types.
type countsResult struct {
	PendingDue          int64    `json:"pending_due"`
	PendingScheduled    int64    `json:"pending_scheduled"`
	Leased              int64    `json:"leased"`
	ExpiredLeases       int64    `json:"expired_leases"`
	OldestDueAgeSeconds *float64 `json:"oldest_due_age_seconds"`
	Succeeded           int64    `json:"succeeded"`
	DeadLettered        int64    `json:"dead_lettered"`
	Canceled            int64    `json:"canceled"`
}

type typeStatsResult struct {
	JobType string `json:"job_type"`
	Paused  bool   `json:"paused"`
	countsResult
	RunTimeP50Seconds *float64 `json:"run_time_p50_seconds"`
	RunTimeP95Seconds *float64 `json:"run_time_p95_seconds"`
}

// secondsOf is d in seconds; nil stays nil.
func secondsOf(d *time.Duration) *float64 {
	if d == nil {
		return nil
	}
	s := d.Seconds()
	return &s
}

func newCounts(t health.TypeStats) countsResult {
	return countsResult{PendingDue: t.PendingDue, PendingScheduled: t.PendingScheduled,
		Leased: t.Leased, ExpiredLeases: t.ExpiredLeases, OldestDueAgeSeconds: secondsOf(t.OldestDueAge),
		Succeeded: t.Succeeded, DeadLettered: t.DeadLettered, Canceled: t.Canceled}
}

func newStatsResult(st health.Stats, org *uuid.UUID) statsResult {
	r := statsResult{At: st.At, WindowSeconds: st.Window.Seconds(), OrganizationID: org, Types: []typeStatsResult{}, Totals: newCounts(st.Total)}
	for _, t := range st.Types {
		r.Types = append(r.Types, typeStatsResult{JobType: t.JobType, Paused: t.Paused, countsResult: newCounts(t),
			RunTimeP50Seconds: secondsOf(t.RunTimeP50), RunTimeP95Seconds: secondsOf(t.RunTimeP95)})
	}
	return r
}

func (r statsResult) text(w io.Writer) {
	scope := "every tenant"
	if r.OrganizationID != nil {
		scope = "organization " + r.OrganizationID.String()
	}
	window := time.Duration(r.WindowSeconds * float64(time.Second))
	fmt.Fprintf(w, "Queue health at %s, %s; finished in the last %s.\n\n", r.At.Format(time.RFC3339), scope, window)
	if len(r.Types) == 0 {
		fmt.Fprintln(w, "No live jobs, and none finished in the window.")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "TYPE\tDUE\tSCHEDULED\tLEASED\tEXPIRED\tOLDEST DUE\tSUCCEEDED\tDEAD\tCANCELED\tP50\tP95\t")
	line := func(name string, c countsResult, p50, p95 *float64) {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", name,
			groupDigits(int(c.PendingDue)), groupDigits(int(c.PendingScheduled)), groupDigits(int(c.Leased)),
			groupDigits(int(c.ExpiredLeases)), ageText(c.OldestDueAgeSeconds),
			groupDigits(int(c.Succeeded)), groupDigits(int(c.DeadLettered)), groupDigits(int(c.Canceled)),
			ageText(p50), ageText(p95))
	}
	for _, t := range r.Types {
		name := t.JobType
		if t.Paused {
			name += " (paused)"
		}
		line(name, t.countsResult, t.RunTimeP50Seconds, t.RunTimeP95Seconds)
	}
	if len(r.Types) > 1 {
		line("(all)", r.Totals, nil, nil)
	}
	tw.Flush()
	fmt.Fprintln(w, "\nDUE: PENDING and due now; EXPIRED: leases that ran out, not yet recovered; OLDEST DUE: the queue lag;")
	fmt.Fprintln(w, "SUCCEEDED, DEAD, CANCELED, P50, P95 (run time): jobs that finished in the window.")
}

// ageText renders seconds for the table: "-" when unknown.
func ageText(s *float64) string {
	if s == nil {
		return "-"
	}
	return roundDuration(time.Duration(*s * float64(time.Second))).String()
}

var pruneCmd = &command{
	name:    "prune",
	summary: "Delete old finished jobs, keeping lineage whole.",
	help: `Deletes the jobs that finished (SUCCEEDED, DEAD_LETTERED, CANCELED; --status
narrows it) before the cutoff, with their events, lineage rows and claims,
in batches of --batch candidates, each its own transaction; no lock is held
between batches and a row another transaction holds (a worker, a replay, a
requeue) is skipped, never waited for. A lineage family (a source and its
replays, transitively) is deleted whole or kept whole: no kept job loses
its lineage, and no replay's idempotency guard disappears while its source
stays. A job a workflow step owns is never deleted. Without --org every
tenant is pruned; with it, no other tenant's job is touched. Stopping it
(Ctrl-C) keeps the batches committed; running it again resumes.

Exactly one of --finished-before and --older-than sets the cutoff; an age
is measured against the database clock, not this machine's.
While it runs, stderr shows the progress when it is a terminal.

Output (--json):
  {"outcome":"prune","dry_run":BOOL,"deleted_jobs":N,"deleted_events":N,
   "kept_for_lineage":N}
(with --dry-run: what it would delete).

Exit codes: 0 done; 2 invalid input; 1 other errors (the batches committed
before stay; rerunning resumes).`,
	setup: func(fs *flagSet) runFunc {
		before := fs.timeOpt("finished-before", "`T`: the cutoff, RFC 3339: jobs that finished before it are deleted.")
		olderThan := fs.durationOpt("older-than", "`D`: the cutoff as an age, a Go duration (720h): jobs that finished more than D ago are deleted.")
		statuses := fs.list("status", "`S`: delete only jobs of this finished status (SUCCEEDED, DEAD_LETTERED, CANCELED); repeat the flag or separate with commas. Default: all three.")
		org := fs.uuidFlag("org", "`UUID`: only this organization (tenant). Default: every tenant.")
		batch := fs.intDefault("batch", health.DefaultPruneBatch, "`N`: candidates per transaction, 1 to 10000.")
		dryRun := fs.boolean("dry-run", false, "Report what would be deleted; delete nothing.")
		return func(ctx context.Context, inv *invocation) (result, error) {
			req := health.PruneRequest{BatchSize: int(*batch), DryRun: *dryRun}
			switch {
			case (*before == nil) == (*olderThan == nil):
				return nil, usageErrorf("prune: give exactly one of --finished-before and --older-than")
			case *before != nil:
				req.FinishedBefore = **before
			case **olderThan <= 0:
				return nil, invalidArgf("--older-than %s must be positive", **olderThan)
			default:
				req.OlderThan = **olderThan
			}
			if *batch < 1 {
				return nil, invalidArgf("--batch %d must be between 1 and %d", *batch, health.MaxPruneBatch)
			}
			for _, s := range *statuses {
				req.Statuses = append(req.Statuses, runledger.JobStatus(strings.ToUpper(strings.TrimSpace(s))))
			}
			if *org != nil {
				req.Scope = &[]runledger.Scope{runledger.Organization(**org)}[0]
			}
			if isTerminal(inv.stderr) && !inv.asJSON() {
				began := time.Now()
				req.Progress = func(r health.PruneResult) {
					fmt.Fprintf(inv.stderr, "\r%s %s jobs, %s events (%s kept for lineage) in %s, %s",
						map[bool]string{true: "would delete", false: "deleted"}[r.DryRun],
						groupDigits(int(r.DeletedJobs)), groupDigits(int(r.DeletedEvents)), groupDigits(int(r.KeptForLineage)),
						groupDigits(r.Batches)+" batches", roundDuration(time.Since(began)))
				}
				defer fmt.Fprintln(inv.stderr)
			}
			res, err := validatedCall(ctx, inv, req, health.Prune)
			if err != nil {
				return nil, err
			}
			return pruneResult{Outcome: "prune", DryRun: res.DryRun, DeletedJobs: res.DeletedJobs, DeletedEvents: res.DeletedEvents,
				KeptForLineage: res.KeptForLineage, res: res, cutoff: res.Cutoff}, nil
		}
	},
}

// pruneResult is the summary of CONTRACT section 10.
type pruneResult struct {
	Outcome        string `json:"outcome"`
	DryRun         bool   `json:"dry_run"`
	DeletedJobs    int64  `json:"deleted_jobs"`
	DeletedEvents  int64  `json:"deleted_events"`
	KeptForLineage int64  `json:"kept_for_lineage"`
	res            health.PruneResult
	cutoff         time.Time
}

func (r pruneResult) text(w io.Writer) {
	verb := "Deleted"
	if r.DryRun {
		verb = "Dry run: would delete"
	}
	fmt.Fprintf(w, "%s %s and %s that finished before %s.\n", verb, count(int(r.DeletedJobs), "job"), count(int(r.DeletedEvents), "event"),
		r.cutoff.UTC().Format(time.RFC3339))
	fmt.Fprintf(w, "Kept %s for lineage and %s a workflow owns; skipped %s held by other transactions (a rerun takes them).\n",
		count(int(r.KeptForLineage), "job"), count(int(r.res.KeptForWorkflow), "job"), count(int(r.res.Skipped), "job"))
}
