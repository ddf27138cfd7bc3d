package main

import (
	"context"
	"fmt"
	"io"

	"github.com/google/uuid"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/replay"
)

var replayCmd = &command{
	name:    "replay",
	summary: "Replay a succeeded job: compare-and-replay, idempotent per key.",
	help: `Creates a fresh PENDING job (run 1) from job UUID, which must be SUCCEEDED
at run N in the caller's scope: same type, tenant, payload and settings. The
source is never touched; the new job gets one ENQUEUED event and a lineage
row, all in one transaction.

The request key K makes it idempotent: repeating the same key and reason
returns the replay made the first time (disposition "existing", nothing
written); the same key with another reason is a conflict (exit 5). A new,
intentional replay of the same run uses a new key.

Outcomes (--json prints exactly one of these objects on stdout):
  replayed, exit 0:
    {"outcome":"replayed","disposition":"inserted"|"existing","source_job_id":"...",
     "source_run_number":N,"replay":{"job_id":"...","status":"PENDING","run_number":1}}
    ("status" and "run_number" are the replay's current ones: later states when existing)
  expectation_mismatch, exit 3: the job exists but is not SUCCEEDED at run N
    {"outcome":"expectation_mismatch","actual":{<job as it is now>}}
  not_found, exit 4: no such job in the caller's scope (another tenant's job
  is reported the same way)
    {"outcome":"not_found"}
Nothing is written for a mismatch or not_found.

Exit codes: 0 replayed; 2 invalid input (blank or too long key or reason, a
workflow-managed job, a disabled job type); 3 expectation mismatch; 4 not
found; 5 key reused with another reason; 1 other errors.`,
	setup: func(fs *flagSet) runFunc {
		job := fs.uuidFlag("job", "`UUID`: the succeeded job to replay (the source).")
		fs.requireFlag("job")
		run := fs.int32Req("run", "`N`: the run at which you saw the job SUCCEEDED; anything else is an expectation mismatch.")
		key := fs.str("key", "`K`: the request key that makes this replay idempotent (at most 512 bytes).")
		fs.requireFlag("key")
		reason := fs.str("reason", "`R`: why the job is replayed, recorded in the lineage and the ENQUEUED event (at most 4096 bytes); a retry must repeat it exactly.")
		fs.requireFlag("reason")
		org := fs.uuidFlag("org", "`UUID`: the caller's organization (tenant). Default: global scope. The job must belong to exactly this scope.")
		return func(ctx context.Context, inv *invocation) (result, error) {
			req := replay.Request{
				Scope:             scopeFor(*org),
				SourceJobID:       **job,
				ExpectedRunNumber: *run,
				Key:               *key,
				Reason:            *reason,
			}
			out, err := validatedCall(ctx, inv, req, replay.SucceededJob)
			if err != nil {
				return nil, err
			}
			return replayResult(req, out), nil
		}
	},
}

// replayResult turns a replay outcome into what the command prints.
func replayResult(req replay.Request, o replay.Outcome) result {
	return replay.Match(o,
		func(r replay.Replayed) result {
			return replayedOutput{
				Outcome:         "replayed",
				Disposition:     r.Disposition,
				SourceJobID:     r.SourceJobID,
				SourceRunNumber: r.SourceRunNumber,
				Replay:          replayJobOutput{JobID: r.Replay.JobID, Status: r.Replay.Status, RunNumber: r.Replay.RunNumber},
			}
		},
		func(m replay.ExpectationMismatch) result {
			return mismatchOutput{Outcome: "expectation_mismatch", Actual: m.Actual, expectedRun: req.ExpectedRunNumber}
		},
		func(replay.NotFound) result {
			return notFoundOutput{Outcome: "not_found", jobID: req.SourceJobID, scope: req.Scope}
		},
	)
}

type replayJobOutput struct {
	JobID     uuid.UUID           `json:"job_id"`
	Status    runledger.JobStatus `json:"status"`
	RunNumber int32               `json:"run_number"`
}

type replayedOutput struct {
	Outcome         string                `json:"outcome"`
	Disposition     runledger.Disposition `json:"disposition"`
	SourceJobID     uuid.UUID             `json:"source_job_id"`
	SourceRunNumber int32                 `json:"source_run_number"`
	Replay          replayJobOutput       `json:"replay"`
}

func (r replayedOutput) text(w io.Writer) {
	if r.Disposition == runledger.DispositionExisting {
		fmt.Fprintf(w, "Replayed (existing): this key and reason already replayed job %s run %d as job %s, now %s at run %d; nothing was written.\n",
			r.SourceJobID, r.SourceRunNumber, r.Replay.JobID, r.Replay.Status, r.Replay.RunNumber)
		return
	}
	fmt.Fprintf(w, "Replayed (inserted): job %s run %d is replayed as new job %s, %s at run %d.\n",
		r.SourceJobID, r.SourceRunNumber, r.Replay.JobID, r.Replay.Status, r.Replay.RunNumber)
}

type mismatchOutput struct {
	Outcome     string        `json:"outcome"`
	Actual      runledger.Job `json:"actual"`
	expectedRun int32
}

func (m mismatchOutput) exitCode() int { return exitMismatch }

func (m mismatchOutput) text(w io.Writer) {
	fmt.Fprintf(w, "Expectation mismatch: job %s is %s at run %d, not SUCCEEDED at run %d; nothing was written.\n",
		m.Actual.ID, m.Actual.Status, m.Actual.RunNumber, m.expectedRun)
	writeJob(w, m.Actual, "")
}

type notFoundOutput struct {
	Outcome string `json:"outcome"`
	jobID   uuid.UUID
	scope   runledger.Scope
}

func (n notFoundOutput) exitCode() int { return exitNotFound }

func (n notFoundOutput) text(w io.Writer) {
	fmt.Fprintf(w, "Not found: no job %s in scope %s; nothing was written.\n", n.jobID, n.scope)
}

// scopeFor is the scope an --org flag names: Global when it is absent.
func scopeFor(org *uuid.UUID) runledger.Scope {
	if org == nil {
		return runledger.Global()
	}
	return runledger.Organization(*org)
}
