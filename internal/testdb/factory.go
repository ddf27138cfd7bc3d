package testdb

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/internal/rows"
	"github.com/runledger-go/runledger/jobs"
	"github.com/runledger-go/runledger/lease"
)

// Factories: ledger states for tests to start from. Seed and DefineType
// write rows with test SQL (a state as it lies in the tables, with no
// events, whatever the library would have done); Define, Enqueue, Claim,
// Leased and LeaseJob go through packages jobs and lease, as an application
// would, and CompleteRequest and FailRequest build the requests that
// finish a leased job.

// Ptr returns a pointer to a copy of v, for the optional fields of requests.
func Ptr[T any](v T) *T { return &v }

// DefineType defines jobType with the schema's defaults (enabled, 8
// attempts, 900 s, priority 100) in test SQL; an existing definition is
// left as it is.
func DefineType(t testing.TB, q Querier, jobType string) {
	t.Helper()
	Exec(t, q, `INSERT INTO job_definitions (job_type) VALUES ($1) ON CONFLICT DO NOTHING`, jobType)
}

// Source describes a finished job for Seed.
type Source struct {
	Scope          runledger.Scope
	JobType        string
	Status         string // job_status, e.g. "SUCCEEDED"
	Run            int32
	Priority       int32
	MaxAttempts    int32
	TimeoutSeconds int32
	Payload        string // JSON text
	ResourceKey    *string
	IdempotencyKey *string
}

// Succeeded is a replay source: a SUCCEEDED "email" job of scope at run 1,
// priority 77, 5 attempts, 123 s, with a payload holding an object and an
// array.
func Succeeded(scope runledger.Scope) Source {
	return Source{Scope: scope, JobType: "email", Status: "SUCCEEDED", Run: 1, Priority: 77,
		MaxAttempts: 5, TimeoutSeconds: 123, Payload: `{"to":"a@example.com","n":[1,2,3]}`}
}

// Seed defines s's job type (DefineType) and inserts s as a worker would
// have left it: attempt 1, stage completed, progress 8/8, a checkpoint, an
// output, worker-1, started two minutes and finished one minute ago, due an
// hour ago. With an idempotency key the row also carries an enqueue request
// snapshot. It writes no event. It returns the job's id (a UUIDv7).
func Seed(t testing.TB, q Querier, s Source) uuid.UUID {
	t.Helper()
	DefineType(t, q, s.JobType)
	id := uuid.Must(uuid.NewV7())
	var request any
	if s.IdempotencyKey != nil {
		request = `{"seeded":true}`
	}
	Exec(t, q, `
		INSERT INTO job_queue (id, job_type, organization_id, payload, status, priority, run_number,
		    attempt, max_attempts, timeout_seconds, stage, progress_done, progress_total, checkpoint,
		    output, worker_id, started_at, finished_at, idempotency_key, enqueue_request,
		    execution_resource_key, next_run_at)
		VALUES ($1, $2, $3, $4::jsonb, $5::job_status, $6, $7, 1, $8, $9, 'completed', 8, 8,
		    '{"cursor":8}', '{"sent":true}', 'worker-1', now() - interval '2 minutes',
		    now() - interval '1 minute', $10, $11::jsonb, $12, now() - interval '1 hour')`,
		id, s.JobType, Tenant(s.Scope), s.Payload, s.Status, s.Priority, s.Run,
		s.MaxAttempts, s.TimeoutSeconds, s.IdempotencyKey, request, s.ResourceKey)
	return id
}

// Define upserts a job definition through jobs.UpsertDefinition.
func Define(t testing.TB, ctx context.Context, pool *pgxpool.Pool, in jobs.DefinitionInput) jobs.Definition {
	t.Helper()
	d, err := jobs.UpsertDefinition(ctx, pool, in)
	if err != nil {
		t.Fatalf("UpsertDefinition(%s): %v", in.JobType, err)
	}
	return d
}

// Enqueue enqueues req (job type "email" when empty) through jobs.Enqueue
// and fails unless a new job was inserted; it returns the PENDING job.
func Enqueue(t testing.TB, ctx context.Context, pool *pgxpool.Pool, req jobs.EnqueueRequest) runledger.Job {
	t.Helper()
	if req.JobType == "" {
		req.JobType = "email"
	}
	res, err := jobs.Enqueue(ctx, pool, req)
	if err != nil {
		t.Fatalf("Enqueue: %v", err)
	}
	if res.Disposition != runledger.DispositionInserted {
		t.Fatalf("Enqueue disposition = %s, want inserted", res.Disposition)
	}
	return res.Job
}

// Claim claims through lease.Claim, with worker "worker-1", limit 10 and a
// 30 s lease unless req says otherwise.
func Claim(t testing.TB, ctx context.Context, pool *pgxpool.Pool, req lease.ClaimRequest) []runledger.Job {
	t.Helper()
	if req.WorkerID == "" {
		req.WorkerID = "worker-1"
	}
	if req.Limit == 0 {
		req.Limit = 10
	}
	if req.Lease == 0 {
		req.Lease = 30 * time.Second
	}
	got, err := lease.Claim(ctx, pool, req)
	if err != nil {
		t.Fatalf("Claim: %v", err)
	}
	return got
}

// Leased enqueues one job (Enqueue) and claims it (LeaseJob): a RUNNING job
// leased to worker-1 for 30 s.
func Leased(t testing.TB, ctx context.Context, pool *pgxpool.Pool, req jobs.EnqueueRequest) runledger.Job {
	t.Helper()
	j := Enqueue(t, ctx, pool, req)
	return LeaseJob(t, ctx, pool, j.ID)
}

// Completed enqueues one job, leases it (Leased) and completes it under
// its lease without output: a SUCCEEDED job at run 1, attempt 1.
func Completed(t testing.TB, ctx context.Context, pool *pgxpool.Pool, req jobs.EnqueueRequest) runledger.Job {
	t.Helper()
	j, err := lease.Complete(ctx, pool, CompleteRequest(Leased(t, ctx, pool, req)))
	if err != nil {
		t.Fatalf("Complete: %v", err)
	}
	return j
}

// LeaseJob claims exactly the given pending job, whatever else is due: it
// raises the job's priority above every other with test SQL and claims one
// job of any type.
func LeaseJob(t testing.TB, ctx context.Context, pool *pgxpool.Pool, id uuid.UUID) runledger.Job {
	t.Helper()
	Exec(t, pool, `UPDATE job_queue SET priority = 2147483647 WHERE id = $1`, id)
	got := Claim(t, ctx, pool, lease.ClaimRequest{Limit: 1})
	if len(got) != 1 || got[0].ID != id {
		t.Fatalf("claimed %v, want %s", IDs(got), id)
	}
	return got[0]
}

// CompleteRequest is the request that completes leased job j under its
// lease, in j's scope as a worker sends it, with no output.
func CompleteRequest(j runledger.Job) lease.CompleteRequest {
	scope := j.Scope()
	return lease.CompleteRequest{Scope: &scope, JobID: j.ID, RunNumber: j.RunNumber, Attempt: j.Attempt, WorkerID: *j.WorkerID}
}

// FailRequest is the request that fails leased job j under its lease, in
// j's scope, with error smtp.down.
func FailRequest(j runledger.Job) lease.FailRequest {
	scope := j.Scope()
	return lease.FailRequest{Scope: &scope, JobID: j.ID, RunNumber: j.RunNumber, Attempt: j.Attempt, WorkerID: *j.WorkerID,
		ErrorCode: "smtp.down", ErrorMessage: "connection refused"}
}

// IDs returns the jobs' ids in order.
func IDs(js []runledger.Job) []uuid.UUID {
	out := make([]uuid.UUID, len(js))
	for i, j := range js {
		out[i] = j.ID
	}
	return out
}

// Tenant is what organization_id stores for scope (the nil UUID for
// Global), for tests that write or compare it in SQL.
func Tenant(scope runledger.Scope) uuid.UUID { return rows.Tenant(scope) }

// OwnByWorkflowStep makes a workflow run of one step, in the job's
// tenant, whose step owns the job; it returns the run's id.
func OwnByWorkflowStep(t testing.TB, q Querier, jobID uuid.UUID) uuid.UUID {
	t.Helper()
	run := uuid.New()
	Exec(t, q, `INSERT INTO workflow_runs (id, organization_id, workflow_type)
		SELECT $1, organization_id, 'wf' FROM job_queue WHERE id = $2`, run, jobID)
	Exec(t, q, `INSERT INTO workflow_steps (organization_id, workflow_run_id, step_key, job_id)
		SELECT organization_id, $1, 'only', id FROM job_queue WHERE id = $2`, run, jobID)
	return run
}
