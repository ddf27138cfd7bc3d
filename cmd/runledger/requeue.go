package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/requeue"
)

// exitNotQuiesced is requeue's exit code for a canceled job whose lease is
// still live: retry after the time the outcome names.
const exitNotQuiesced = 7

var requeueCmd = &command{
	name:    "requeue",
	summary: "Requeue a dead-lettered or canceled job in place: compare-and-requeue, idempotent per run and reason.",
	help: `Puts job UUID back to PENDING, in place (the same id, run N+1, attempt 0,
stage queued, due now), if it is still --status S at --run N in the caller's
scope, as you observed it: the compare-and-set compares what you saw, so a
job that moved on since (a worker, another operator) is not touched. Its
progress and checkpoint are kept (so the next run can resume) unless
--reset-progress; output, lease, worker, timestamps and the last error are
cleared; status_reason becomes R; the job gets one REQUEUED event for run N
recording R. S is DEAD_LETTERED or CANCELED: a SUCCEEDED job is replayed
('runledger replay'), not requeued.

A run is requeued at most once: repeating the same request (job, status,
run and reason) after it was done answers "existing" with the job as it is
now and writes nothing, so a retry after a lost reply is safe. With another
reason it is an expectation mismatch.

A CANCELED job whose canceled attempt's lease is still live may still be
running in its worker: it is not requeued until the lease runs out
(cancellation_not_quiesced, exit 7, with the time to retry after).

Outcomes (--json prints exactly one of these objects on stdout):
  requeued, exit 0:
    {"outcome":"requeued","disposition":"inserted"|"existing","job_id":"...",
     "before":{<job before>}|null,"after":{<job after, or as it is now>},"event_id":N|null}
    (before and event_id are null when existing)
  expectation_mismatch, exit 3: the job is not S at run N (or that run was
  requeued with another reason)
    {"outcome":"expectation_mismatch","actual":{<job as it is now>}}
  not_found, exit 4: no such job in the caller's scope (another tenant's job
  is reported the same way)
    {"outcome":"not_found"}
  cancellation_not_quiesced, exit 7:
    {"outcome":"cancellation_not_quiesced","actual":{<job>},"retry_after":"<lease expiry>"}
Nothing is written unless the outcome is requeued with disposition inserted.

Exit codes: 0 requeued; 2 invalid input (a --status other than DEAD_LETTERED
or CANCELED, a blank or too long reason, a workflow-managed job); 3
expectation mismatch; 4 not found; 7 not quiesced; 1 other errors.`,
	setup: func(fs *flagSet) runFunc {
		job := fs.uuidFlag("job", "`UUID`: the job to requeue.")
		fs.requireFlag("job")
		status := fs.str("status", "`S`: the status you saw the job in: DEAD_LETTERED or CANCELED; anything else is an expectation mismatch.")
		fs.requireFlag("status")
		run := fs.int32Req("run", "`N`: the run you saw end in that status; anything else is an expectation mismatch.")
		reason := fs.str("reason", "`R`: why the job is requeued, recorded as its status reason and in the REQUEUED event (at most 4096 bytes); a retry must repeat it exactly.")
		fs.requireFlag("reason")
		org := fs.uuidFlag("org", "`UUID`: the caller's organization (tenant). Default: global scope. The job must belong to exactly this scope.")
		reset := fs.boolean("reset-progress", false, "Clear the job's progress and checkpoint: the next run starts from nothing. Default: keep them.")
		return func(ctx context.Context, inv *invocation) (result, error) {
			st, err := requeueStatus("requeue", *status)
			if err != nil {
				return nil, err
			}
			req := requeue.Request{
				Scope: scopeFor(*org), JobID: **job, ExpectedStatus: st, ExpectedRunNumber: *run,
				StatePolicy: statePolicy(*reset), Reason: *reason,
			}
			out, err := validatedCall(ctx, inv, req, requeue.Job)
			if err != nil {
				return nil, err
			}
			return requeueResult(req, out), nil
		}
	},
}

// requeueStatus reads a --status value (any case) as a requeueable status,
// or returns a usage error (exit 2) that says what to do with a SUCCEEDED
// job.
func requeueStatus(cmd, s string) (requeue.Status, error) {
	st, err := requeue.ParseStatus(strings.ToUpper(strings.TrimSpace(s)))
	if err == nil {
		return st, nil
	}
	return "", usageErrorf("%s: --status must be DEAD_LETTERED or CANCELED, got %q; a SUCCEEDED job is replayed ('runledger replay'), not requeued", cmd, s)
}

// statePolicy is the policy --reset-progress names.
func statePolicy(reset bool) requeue.StatePolicy {
	if reset {
		return requeue.ResetProgress
	}
	return requeue.PreserveProgress
}

// requeueResult turns a requeue outcome into what the command prints.
func requeueResult(req requeue.Request, o requeue.Outcome) result {
	return requeue.Match(o,
		func(r requeue.Requeued) result {
			return requeuedOutput{Outcome: "requeued", Disposition: r.Disposition, JobID: r.After.ID, Before: r.Before, After: r.After,
				EventID: r.EventID, req: req}
		},
		func(m requeue.ExpectationMismatch) result {
			return requeueMismatchOutput{Outcome: "expectation_mismatch", Actual: m.Actual, req: req}
		},
		func(n requeue.NotQuiesced) result {
			return notQuiescedOutput{Outcome: "cancellation_not_quiesced", Actual: n.Actual, RetryAfter: n.RetryAfter.UTC()}
		},
		func(requeue.NotFound) result {
			return notFoundOutput{Outcome: "not_found", jobID: req.JobID, scope: req.Scope}
		},
	)
}

// requeuedOutput is requeue's requeued outcome; with --json its fields are
// exactly the contract's, in this order.
type requeuedOutput struct {
	Outcome     string                `json:"outcome"`
	Disposition runledger.Disposition `json:"disposition"`
	JobID       uuid.UUID             `json:"job_id"`
	Before      *runledger.Job        `json:"before"`
	After       runledger.Job         `json:"after"`
	EventID     *int64                `json:"event_id"`
	req         requeue.Request
}

func (r requeuedOutput) text(w io.Writer) {
	if r.Disposition == runledger.DispositionExisting {
		fmt.Fprintf(w, "Requeued (existing): run %d of job %s was already requeued with this reason; nothing was written. The job now:\n",
			r.req.ExpectedRunNumber, r.JobID)
		writeJob(w, r.After, "  ")
		return
	}
	fmt.Fprintf(w, "Requeued (inserted): job %s, %s at run %d, is PENDING again at run %d (REQUEUED event %d; progress and checkpoint %s).\n",
		r.JobID, r.req.ExpectedStatus, r.req.ExpectedRunNumber, r.After.RunNumber, *r.EventID, policyText(r.req.StatePolicy))
	writeJob(w, r.After, "  ")
}

// policyText says what a policy did with progress and checkpoint.
func policyText(p requeue.StatePolicy) string {
	if p == requeue.ResetProgress {
		return "cleared"
	}
	return "kept"
}

type requeueMismatchOutput struct {
	Outcome string        `json:"outcome"`
	Actual  runledger.Job `json:"actual"`
	req     requeue.Request
}

func (m requeueMismatchOutput) exitCode() int { return exitMismatch }

func (m requeueMismatchOutput) text(w io.Writer) {
	fmt.Fprintf(w, "Expectation mismatch: job %s is %s at run %d, not %s at run %d (or that run was requeued with another reason); nothing was written.\n",
		m.Actual.ID, m.Actual.Status, m.Actual.RunNumber, m.req.ExpectedStatus, m.req.ExpectedRunNumber)
	writeJob(w, m.Actual, "")
}

type notQuiescedOutput struct {
	Outcome    string        `json:"outcome"`
	Actual     runledger.Job `json:"actual"`
	RetryAfter time.Time     `json:"retry_after"`
}

func (n notQuiescedOutput) exitCode() int { return exitNotQuiesced }

func (n notQuiescedOutput) text(w io.Writer) {
	fmt.Fprintf(w, "Not quiesced: job %s was canceled while leased, and its worker may still run it until the lease ends at %s; retry after that. Nothing was written.\n",
		n.Actual.ID, humanTime(n.RetryAfter))
	writeJob(w, n.Actual, "")
}
