package runledger

import (
	"encoding/json"
	"time"

	"github.com/google/uuid"
)

// JobStatus is a job's lifecycle state, spelled as in the job_status enum.
type JobStatus string

// The job statuses. PENDING jobs wait to be claimed; LEASED jobs are held by
// a worker; the other three are final until an operator acts.
const (
	JobStatusPending      JobStatus = "PENDING"
	JobStatusLeased       JobStatus = "LEASED"
	JobStatusSucceeded    JobStatus = "SUCCEEDED"
	JobStatusDeadLettered JobStatus = "DEAD_LETTERED"
	JobStatusCanceled     JobStatus = "CANCELED"
)

// JobStage is the coarse progress marker stored in job_queue.stage.
type JobStage string

// The job stages this package writes.
const (
	JobStageQueued    JobStage = "queued"
	JobStageScheduled JobStage = "scheduled"
	JobStageRunning   JobStage = "running"
	JobStageCompleted JobStage = "completed"
)

// JobEventType is the kind of a job event, spelled as in the job_event_type
// enum.
type JobEventType string

// The job event types.
const (
	JobEventEnqueued       JobEventType = "ENQUEUED"
	JobEventLeased         JobEventType = "LEASED"
	JobEventHeartbeat      JobEventType = "HEARTBEAT"
	JobEventStageChanged   JobEventType = "STAGE_CHANGED"
	JobEventProgress       JobEventType = "PROGRESS"
	JobEventRetryScheduled JobEventType = "RETRY_SCHEDULED"
	JobEventSucceeded      JobEventType = "SUCCEEDED"
	JobEventFailed         JobEventType = "FAILED"
	JobEventDeadLettered   JobEventType = "DEAD_LETTERED"
	JobEventCanceled       JobEventType = "CANCELED"
	JobEventRequeued       JobEventType = "REQUEUED"
)

// FailureKind says why an attempt failed, spelled as in the
// job_failure_kind enum; events of failed attempts carry it.
type FailureKind string

// The failure kinds.
const (
	// FailureRetryable: the handler failed; the job is retried while it
	// has attempts left.
	FailureRetryable FailureKind = "RETRYABLE"
	// FailureTerminal: the handler failed for good; the job is
	// dead-lettered whatever attempts remain.
	FailureTerminal FailureKind = "TERMINAL"
	// FailurePanicked: the handler panicked; the job is dead-lettered.
	FailurePanicked FailureKind = "PANICKED"
	// FailureTimeout: the handler ran past the job's timeout; the job is
	// retried while it has attempts left.
	FailureTimeout FailureKind = "TIMEOUT"
	// FailureLeaseExpired: the lease ran out before the worker finished
	// (lease recovery); the job is retried while it has attempts left.
	FailureLeaseExpired FailureKind = "LEASE_EXPIRED"
)

// Disposition says whether an idempotent write (a keyed enqueue, a replay)
// created its job now or found the one an earlier call created.
type Disposition string

const (
	// DispositionInserted: this call created the job.
	DispositionInserted Disposition = "inserted"
	// DispositionExisting: an earlier call with the same key and request
	// created it; nothing was written now.
	DispositionExisting Disposition = "existing"
)

// Job is one row of the job ledger as callers see it. Times are UTC. JSON
// fields (Payload, Checkpoint, Output) hold the stored jsonb text and are
// nil when the column is NULL. The request snapshot of keyed jobs is
// internal and not part of the record.
type Job struct {
	ID                   uuid.UUID       `json:"id"`
	JobType              string          `json:"job_type"`
	OrganizationID       *uuid.UUID      `json:"organization_id"`
	Payload              json.RawMessage `json:"payload"`
	Status               JobStatus       `json:"status"`
	Priority             int32           `json:"priority"`
	RunNumber            int32           `json:"run_number"`
	Attempt              int32           `json:"attempt"`
	MaxAttempts          int32           `json:"max_attempts"`
	TimeoutSeconds       int32           `json:"timeout_seconds"`
	NextRunAt            time.Time       `json:"next_run_at"`
	LeaseExpiresAt       *time.Time      `json:"lease_expires_at"`
	LastHeartbeatAt      *time.Time      `json:"last_heartbeat_at"`
	WorkerID             *string         `json:"worker_id"`
	StartedAt            *time.Time      `json:"started_at"`
	FinishedAt           *time.Time      `json:"finished_at"`
	Stage                JobStage        `json:"stage"`
	ProgressDone         *int64          `json:"progress_done"`
	ProgressTotal        *int64          `json:"progress_total"`
	ProgressPct          *float64        `json:"progress_pct"`
	Checkpoint           json.RawMessage `json:"checkpoint"`
	Output               json.RawMessage `json:"output"`
	IdempotencyKey       *string         `json:"idempotency_key"`
	StatusReason         *string         `json:"status_reason"`
	LastErrorCode        *string         `json:"last_error_code"`
	LastErrorMessage     *string         `json:"last_error_message"`
	CreatedAt            time.Time       `json:"created_at"`
	UpdatedAt            time.Time       `json:"updated_at"`
	ExecutionResourceKey *string         `json:"execution_resource_key"`
}

// Scope returns the scope the job belongs to.
func (j Job) Scope() Scope { return ScopeOf(j.OrganizationID) }

// JobEvent is one entry of a job's history. Attempt is nil for events not
// tied to an attempt (ENQUEUED, CANCELED of a never-leased job).
type JobEvent struct {
	ID            int64           `json:"id"`
	JobID         uuid.UUID       `json:"job_id"`
	RunNumber     int32           `json:"run_number"`
	Attempt       *int32          `json:"attempt"`
	EventType     JobEventType    `json:"event_type"`
	Stage         *JobStage       `json:"stage"`
	ProgressDone  *int64          `json:"progress_done"`
	ProgressTotal *int64          `json:"progress_total"`
	Payload       json.RawMessage `json:"payload"`
	OccurredAt    time.Time       `json:"occurred_at"`
}

// ReplayLineage records that ReplayJobID was created by compare-and-replay
// from run SourceRunNumber of SourceJobID, for the request key and reason
// given. ReplayStatus and ReplayRunNumber, when set, are the replay job's
// state at the time of the read.
type ReplayLineage struct {
	ReplayJobID      uuid.UUID  `json:"replay_job_id"`
	SourceJobID      uuid.UUID  `json:"source_job_id"`
	SourceRunNumber  int32      `json:"source_run_number"`
	ReplayRequestKey string     `json:"replay_request_key"`
	Reason           string     `json:"reason"`
	CreatedAt        time.Time  `json:"created_at"`
	ReplayStatus     *JobStatus `json:"replay_status,omitempty"`
	ReplayRunNumber  *int32     `json:"replay_run_number,omitempty"`
}
