package main

import (
	"context"
	"fmt"
	"io"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/jobs"
)

var enqueueCmd = &command{
	name:    "enqueue",
	summary: "Enqueue a job.",
	help: `Creates a PENDING job of type T (which must be defined and enabled) with an
ENQUEUED event. Settings left out take the type's defaults.

With --idempotency-key the enqueue is keyed: at most one job exists per
(type, scope, key). Repeating the same request returns that job with
disposition "existing" and writes nothing; the same key with a different
request (payload, settings) is a conflict, exit 5.

Output (--json):
  {"disposition":"inserted"|"existing","job":{<job>}}
where <job> has the fields id, job_type, organization_id, payload, status,
priority, run_number, attempt, max_attempts, timeout_seconds, next_run_at,
lease_expires_at, last_heartbeat_at, worker_id, started_at, finished_at,
stage, progress_done, progress_total, progress_pct, checkpoint, output,
idempotency_key, status_reason, last_error_code, last_error_message,
created_at, updated_at, execution_resource_key (null when not set).

Exit codes: 0 done; 2 invalid input or job type missing or disabled;
5 idempotency key reused with a different request; 1 other errors.`,
	setup: func(fs *flagSet) runFunc {
		jobType := fs.str("type", "`T`: the job type; it must be defined and enabled (see 'runledger definitions upsert').")
		fs.requireFlag("type")
		payload := fs.jsonFlag("payload", "`JSON`: the job's payload, any JSON value. Default: {}.")
		org := fs.uuidFlag("org", "`UUID`: the organization (tenant) the job belongs to. Default: global scope (no organization).")
		priority := fs.int32Opt("priority", "`N`: priority, any integer; higher is claimed first. Default: the type's.")
		maxAttempts := fs.int32Opt("max-attempts", "`N`: attempts before the job is dead-lettered (at least 1). Default: the type's.")
		timeout := fs.int32Opt("timeout-seconds", "`N`: per-attempt timeout in seconds (at least 1). Default: the type's.")
		key := fs.str("idempotency-key", "`K`: makes the enqueue keyed: one job per (type, scope, key); repeating the request returns it.")
		resource := fs.str("resource-key", "`K`: an execution resource: jobs sharing a key never hold a lease at the same time.")
		return func(ctx context.Context, inv *invocation) (result, error) {
			req := jobs.EnqueueRequest{
				Scope:                scopeFor(*org),
				JobType:              *jobType,
				Payload:              *payload,
				Priority:             *priority,
				MaxAttempts:          *maxAttempts,
				TimeoutSeconds:       *timeout,
				IdempotencyKey:       *key,
				ExecutionResourceKey: *resource,
			}
			if fs.isSet("idempotency-key") && *key == "" {
				return nil, invalidArgf("enqueue: --idempotency-key must not be empty")
			}
			if fs.isSet("resource-key") && *resource == "" {
				return nil, invalidArgf("enqueue: --resource-key must not be empty")
			}
			res, err := validatedCall(ctx, inv, req, jobs.Enqueue)
			if err != nil {
				return nil, err
			}
			return enqueueResult{Disposition: res.Disposition, Job: res.Job}, nil
		}
	},
}

type enqueueResult struct {
	Disposition runledger.Disposition `json:"disposition"`
	Job         runledger.Job         `json:"job"`
}

func (r enqueueResult) text(w io.Writer) {
	if r.Disposition == runledger.DispositionExisting {
		fmt.Fprintf(w, "Job %s already exists for this idempotency key (existing); nothing was written.\n", r.Job.ID)
	} else {
		fmt.Fprintf(w, "Enqueued job %s (inserted).\n", r.Job.ID)
	}
	writeJob(w, r.Job, "")
}
