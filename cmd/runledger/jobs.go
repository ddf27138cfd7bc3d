package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/inspect"
	"github.com/runledger-go/runledger/jobs"
	"github.com/runledger-go/runledger/requeue"
)

var jobsShowCmd = &command{
	name:    "jobs show",
	args:    "UUID",
	summary: "Show a job, its events, the replays made from it, the job it replays and its requeue history.",
	help: `Prints the job record, its history (events in the order they
happened), the replays made from it (replay job, request key, reason, when,
and the replay's current status) and, if it is itself a replay, the job
and run it was replayed from, and its requeue history (each requeue: from
which run, when, why). Everything is read in one read-only snapshot.

A long history is paged: the newest --events events (default 100) are
shown, and the output says when older ones exist and how to see them
(--events-before ID, the id of the oldest event shown). Replays likewise:
the oldest --replays (default 100), then --replays-after UUID.

Only the caller's scope is visible: without --org the global scope, with
--org that organization's jobs. A job in another scope is not found (exit
4), exactly like a job that does not exist. UUID may come before or after
the flags.

Output (--json):
  {"job":{<job>},
   "events":[{"id":1,"job_id":"...","run_number":1,"attempt":null,"event_type":"ENQUEUED",
              "stage":"queued","progress_done":null,"progress_total":null,"payload":{...},
              "occurred_at":"..."}, ...],
   "replays":[{"replay_job_id":"...","source_job_id":"...","source_run_number":1,
               "replay_request_key":"...","reason":"...","created_at":"...",
               "replay_status":"PENDING","replay_run_number":1}, ...],
   "replayed_from":{"replay_job_id":"...","source_job_id":"...","source_run_number":1,
                    "replay_request_key":"...","reason":"...","created_at":"..."} | null,
   "requeues":[{"event_id":N,"from_run_number":1,"from_attempt":1,"requeued_at":"...",
                "reason":"...","state_policy":"preserve_progress_and_checkpoint"}, ...]}
and "more_events":true / "more_replays":true added when a further page exists;
"requeues" is there only for a job that was requeued.
with the job fields listed in 'runledger help enqueue'.

Exit codes: 0 done; 2 invalid input; 4 not found in the caller's scope;
1 other errors.`,
	setup: func(fs *flagSet) runFunc {
		org := fs.uuidFlag("org", "`UUID`: the caller's organization (tenant). Default: global scope.")
		events := fs.intDefault("events", inspect.DefaultDetailLimit, "`N`: show the newest N events (1 to 1000)")
		eventsBefore := fs.int64Opt("events-before", "`ID`: page back: only events older than event ID")
		replays := fs.intDefault("replays", inspect.DefaultDetailLimit, "`N`: show the oldest N replays (1 to 1000)")
		replaysAfter := fs.uuidFlag("replays-after", "`UUID`: page forward: only replays after replay job UUID")
		return func(ctx context.Context, inv *invocation) (result, error) {
			id, err := uuid.Parse(inv.args[0])
			if err != nil {
				return nil, invalidArgf("jobs show: %q is not a UUID", inv.args[0])
			}
			req := inspect.DetailRequest{Scope: scopeFor(*org), JobID: id, EventLimit: explicitLimit(*events), EventsBefore: *eventsBefore,
				ReplayLimit: explicitLimit(*replays), ReplaysAfter: *replaysAfter}
			if err := req.Validate(); err != nil {
				return nil, err
			}
			pool, err := inv.Pool(ctx)
			if err != nil {
				return nil, err
			}
			return showJob(ctx, pool, req)
		}
	},
}

// explicitLimit passes a limit flag to the library, where 0 means the
// default: here 0 was asked for, which the library's validation then
// refuses like any limit below 1.
func explicitLimit(n int32) int {
	if n == 0 {
		return -1
	}
	return int(n)
}

// showJob reads the job detail for jobs show.
func showJob(ctx context.Context, pool *pgxpool.Pool, req inspect.DetailRequest) (*jobView, error) {
	d, err := inspect.GetDetail(ctx, pool, req)
	if err != nil {
		return nil, err
	}
	v := &jobView{Detail: d}
	// Whether the job's type is paused (flow control) says why a due job
	// waits. A type without a definition is simply not paused.
	def, err := jobs.GetDefinition(ctx, pool, d.Job.JobType)
	switch {
	case err == nil:
		v.JobTypePaused = def.Paused
	case !errors.Is(err, runledger.CodeDefinitionMissing):
		return nil, err
	}
	return v, nil
}

// jobView is the output of jobs show: the detail's JSON, and its text.
// job_type_paused is added, true, while the job's type is paused.
type jobView struct {
	inspect.Detail
	JobTypePaused bool `json:"job_type_paused,omitempty"`
}

func (v *jobView) text(w io.Writer) {
	writeJob(w, v.Job, "")
	if v.JobTypePaused {
		fmt.Fprintf(w, "\nJob type %s is paused: workers claim none of its jobs until 'runledger definitions resume --type %s'.\n", v.Job.JobType, v.Job.JobType)
	}
	if v.MoreEvents && len(v.Events) > 0 {
		fmt.Fprintf(w, "\nEvents (the newest %d; older ones exist: --events-before %d):\n", len(v.Events), v.Events[0].ID)
	} else {
		fmt.Fprintf(w, "\nEvents (%d):\n", len(v.Events))
	}
	writeEvents(w, v.Events, "  ")
	if v.MoreReplays && len(v.Replays) > 0 {
		fmt.Fprintf(w, "\nReplays made from this job (the oldest %d; more exist: --replays-after %s):\n", len(v.Replays), v.Replays[len(v.Replays)-1].ReplayJobID)
	} else {
		fmt.Fprintf(w, "\nReplays made from this job (%d):\n", len(v.Replays))
	}
	writeReplays(w, v.Replays, "  ")
	fmt.Fprintln(w, "\nReplayed from:")
	writeReplayedFrom(w, v.ReplayedFrom, "  ")
	fmt.Fprintf(w, "\nRequeue history (%d):\n", len(v.Requeues))
	writeRequeues(w, v.Requeues, "  ")
}

// writeRequeues prints a job's requeue history, one line each.
func writeRequeues(w io.Writer, rs []requeue.Record, indent string) {
	if len(rs) == 0 {
		fmt.Fprintf(w, "%snone\n", indent)
		return
	}
	for _, r := range rs {
		progress := "kept progress"
		if r.StatePolicy == requeue.ResetProgress.String() {
			progress = "reset progress"
		}
		fmt.Fprintf(w, "%srun %d requeued at %s (%s, event %d): %s\n", indent, r.FromRunNumber, humanTime(r.RequeuedAt),
			progress, r.EventID, strconv.Quote(r.Reason))
	}
}
