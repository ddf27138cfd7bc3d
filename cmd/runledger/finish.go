package main

import (
	"context"
	"fmt"
	"io"

	"github.com/google/uuid"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/lease"
)

// leaseFlags are the flags that name the lease complete and fail act on,
// and the optional scope they act in.
type leaseFlags struct {
	job     **uuid.UUID
	run     *int32
	attempt *int32
	worker  *string
	org     **uuid.UUID
}

// scope returns the scope of --org, or nil (unscoped) without it.
func (l leaseFlags) scope() *runledger.Scope {
	if *l.org == nil {
		return nil
	}
	s := runledger.Organization(**l.org)
	return &s
}

func defineLeaseFlags(fs *flagSet) leaseFlags {
	l := leaseFlags{
		job:     fs.uuidFlag("job", "`UUID`: the leased job's id."),
		run:     fs.int32Req("run", "`N`: the run number the job was claimed at (as 'runledger claim' printed it)."),
		attempt: fs.int32Req("attempt", "`N`: the attempt number the job was claimed at."),
		worker:  fs.str("worker", "`W`: the worker id the job was claimed by."),
		org:     fs.uuidFlag("org", "`UUID`: the caller's organization (tenant); a job of another scope is not found. Default: unscoped, the lease alone names the job."),
	}
	fs.requireFlag("job")
	fs.requireFlag("worker")
	return l
}

const leaseHelp = `It is a compare-and-set on the lease: the job must be LEASED at exactly
this run and attempt to this worker. When it is not (the lease expired and
another worker took the job, it was already finished, the numbers are
wrong), nothing is written and the command exits 3; a job id that does not
exist exits 4. The error never names the worker holding the job.

Without --org the lease alone names the job, whatever its tenant: the
caller is trusted as a worker of the whole ledger, and a mismatch says only
that the job exists, not its status, run or attempt. With --org the job
must belong to that organization: a job of another scope (or of none)
exits 4 exactly like a missing one, and a mismatch names the job's status,
run and attempt.`

// finishOutputHelp ends the help of complete and fail.
const finishOutputHelp = `Output (--json):
  {"job":{<job>}}
with the job fields listed in 'runledger help enqueue'.

Exit codes: 0 done; 2 invalid input; 3 lease not held (job.lease_mismatch);
4 no such job (in the --org scope, when given); 1 other errors.`

var completeCmd = &command{
	name:    "complete",
	summary: "Mark a leased job SUCCEEDED.",
	help: `Marks the job SUCCEEDED, stores --output, writes a SUCCEEDED event and
releases the lease and any execution resource claim.

` + leaseHelp + "\n\n" + finishOutputHelp,
	setup: func(fs *flagSet) runFunc {
		held := defineLeaseFlags(fs)
		output := fs.jsonFlag("output", "`JSON`: the job's result, any JSON value. Default: none (null).")
		return func(ctx context.Context, inv *invocation) (result, error) {
			req := lease.CompleteRequest{
				Scope: held.scope(),
				JobID: **held.job, RunNumber: *held.run, Attempt: *held.attempt, WorkerID: *held.worker,
				Output: *output,
			}
			job, err := validatedCall(ctx, inv, req, lease.Complete)
			if err != nil {
				return nil, err
			}
			return finishResult{Job: job, verb: "complete", attempt: req.Attempt}, nil
		}
	},
}

var failCmd = &command{
	name:    "fail",
	summary: "Record a failed attempt of a leased job (retry or dead-letter).",
	help: `Records that the attempt failed. With attempts left and no --terminal, the
job goes back to PENDING, due after --retry-delay (default: 1s doubled for
each attempt, at most 1h), with a RETRY_SCHEDULED event; the next claim
starts the next attempt of the same run. Otherwise it is DEAD_LETTERED with
a DEAD_LETTERED event. Either way the error code and message are stored.

` + leaseHelp + "\n\n" + finishOutputHelp,
	setup: func(fs *flagSet) runFunc {
		held := defineLeaseFlags(fs)
		code := fs.str("error-code", "`C`: a short machine-readable error code, stored as last_error_code.")
		message := fs.str("error-message", "`M`: a human-readable error message, stored as last_error_message.")
		terminal := fs.boolean("terminal", false, "Dead-letter the job now, whatever attempts remain.")
		delay := fs.durationOpt("retry-delay", "`D`: how long until the retry is due, as a Go duration (0s, 30s, 5m). Default: exponential backoff.")
		return func(ctx context.Context, inv *invocation) (result, error) {
			req := lease.FailRequest{
				Scope: held.scope(),
				JobID: **held.job, RunNumber: *held.run, Attempt: *held.attempt, WorkerID: *held.worker,
				ErrorCode: *code, ErrorMessage: *message, Terminal: *terminal, RetryDelay: *delay,
			}
			job, err := validatedCall(ctx, inv, req, lease.Fail)
			if err != nil {
				return nil, err
			}
			return finishResult{Job: job, verb: "fail", attempt: req.Attempt}, nil
		}
	},
}

// finishResult is the output of complete and fail.
type finishResult struct {
	Job     runledger.Job `json:"job"`
	verb    string
	attempt int32
}

func (r finishResult) text(w io.Writer) {
	j := r.Job
	switch {
	case r.verb == "complete":
		fmt.Fprintf(w, "Completed job %s (run %d, attempt %d): %s.\n", j.ID, j.RunNumber, r.attempt, j.Status)
	case j.Status == runledger.JobStatusDeadLettered:
		fmt.Fprintf(w, "Attempt %d of job %s failed; the job is dead-lettered (%s).\n", r.attempt, j.ID, j.Status)
	default:
		fmt.Fprintf(w, "Attempt %d of job %s failed; attempt %d of %d is due at %s.\n",
			r.attempt, j.ID, j.Attempt+1, j.MaxAttempts, humanTime(j.NextRunAt))
	}
	writeJob(w, j, "")
}
