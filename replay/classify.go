package replay

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/db"
	"github.com/runledger-go/runledger/internal/rows"
)

// jobJSON is a job_queue row as to_jsonb writes it: every column under
// its name; timestamps in ISO 8601 with an offset, numeric as a JSON
// number, jsonb columns nested as they are.
type jobJSON struct {
	ID                   uuid.UUID       `json:"id"`
	JobType              string          `json:"job_type"`
	OrganizationID       *uuid.UUID      `json:"organization_id"`
	Payload              json.RawMessage `json:"payload"`
	Status               db.JobStatus    `json:"status"`
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
	Stage                string          `json:"stage"`
	ProgressDone         *int64          `json:"progress_done"`
	ProgressTotal        *int64          `json:"progress_total"`
	ProgressPct          *float64        `json:"progress_pct"`
	Checkpoint           json.RawMessage `json:"checkpoint"`
	IdempotencyKey       *string         `json:"idempotency_key"`
	StatusReason         *string         `json:"status_reason"`
	LastErrorCode        *string         `json:"last_error_code"`
	LastErrorMessage     *string         `json:"last_error_message"`
	CreatedAt            time.Time       `json:"created_at"`
	UpdatedAt            time.Time       `json:"updated_at"`
	EnqueueRequest       json.RawMessage `json:"enqueue_request"`
	Output               json.RawMessage `json:"output"`
	ExecutionResourceKey *string         `json:"execution_resource_key"`
}

// actualJob decodes the job of a classification read into the domain
// record, as the mismatch outcome reports it.
func actualJob(raw []byte) (runledger.Job, error) {
	var j jobJSON
	if err := json.Unmarshal(raw, &j); err != nil {
		return runledger.Job{}, runledger.InvariantViolated(fmt.Sprintf("decode replay source row: %v", err))
	}
	return rows.Job(db.JobQueue{
		ID:                   j.ID,
		JobType:              j.JobType,
		OrganizationID:       j.OrganizationID,
		Payload:              nullableJSON(j.Payload),
		Status:               j.Status,
		Priority:             j.Priority,
		RunNumber:            j.RunNumber,
		Attempt:              j.Attempt,
		MaxAttempts:          j.MaxAttempts,
		TimeoutSeconds:       j.TimeoutSeconds,
		NextRunAt:            j.NextRunAt,
		LeaseExpiresAt:       j.LeaseExpiresAt,
		LastHeartbeatAt:      j.LastHeartbeatAt,
		WorkerID:             j.WorkerID,
		StartedAt:            j.StartedAt,
		FinishedAt:           j.FinishedAt,
		Stage:                j.Stage,
		ProgressDone:         j.ProgressDone,
		ProgressTotal:        j.ProgressTotal,
		ProgressPct:          j.ProgressPct,
		Checkpoint:           nullableJSON(j.Checkpoint),
		IdempotencyKey:       j.IdempotencyKey,
		StatusReason:         j.StatusReason,
		LastErrorCode:        j.LastErrorCode,
		LastErrorMessage:     j.LastErrorMessage,
		CreatedAt:            j.CreatedAt,
		UpdatedAt:            j.UpdatedAt,
		EnqueueRequest:       nullableJSON(j.EnqueueRequest),
		Output:               nullableJSON(j.Output),
		ExecutionResourceKey: j.ExecutionResourceKey,
	})
}

// nullableJSON maps a nested JSON null (a NULL jsonb column) to nil, as
// scanning the column itself would.
func nullableJSON(m json.RawMessage) []byte {
	if len(m) == 0 || bytes.Equal(m, []byte("null")) {
		return nil
	}
	return []byte(m)
}
