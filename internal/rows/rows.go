// Package rows turns generated db rows into runledger domain values,
// decoding enums and stages strictly: an unknown value is an Internal error,
// never a silent default.
package rows

import (
	"encoding/json"
	"time"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/db"
)

// Job converts a job_queue row. Times become UTC.
func Job(r db.JobQueue) (runledger.Job, error) {
	status, err := runledger.ParseJobStatus(string(r.Status))
	if err != nil {
		return runledger.Job{}, err
	}
	stage, err := runledger.ParseJobStage(r.Stage)
	if err != nil {
		return runledger.Job{}, err
	}
	return runledger.Job{
		ID:                   r.ID,
		JobType:              r.JobType,
		OrganizationID:       r.OrganizationID,
		Payload:              rawJSON(r.Payload),
		Status:               status,
		Priority:             r.Priority,
		RunNumber:            r.RunNumber,
		Attempt:              r.Attempt,
		MaxAttempts:          r.MaxAttempts,
		TimeoutSeconds:       r.TimeoutSeconds,
		NextRunAt:            r.NextRunAt.UTC(),
		LeaseExpiresAt:       utcPtr(r.LeaseExpiresAt),
		LastHeartbeatAt:      utcPtr(r.LastHeartbeatAt),
		WorkerID:             r.WorkerID,
		StartedAt:            utcPtr(r.StartedAt),
		FinishedAt:           utcPtr(r.FinishedAt),
		Stage:                stage,
		ProgressDone:         r.ProgressDone,
		ProgressTotal:        r.ProgressTotal,
		ProgressPct:          r.ProgressPct,
		Checkpoint:           rawJSON(r.Checkpoint),
		Output:               rawJSON(r.Output),
		IdempotencyKey:       r.IdempotencyKey,
		StatusReason:         r.StatusReason,
		LastErrorCode:        r.LastErrorCode,
		LastErrorMessage:     r.LastErrorMessage,
		CreatedAt:            r.CreatedAt.UTC(),
		UpdatedAt:            r.UpdatedAt.UTC(),
		ExecutionResourceKey: r.ExecutionResourceKey,
	}, nil
}

// Jobs converts rows in order, stopping at the first that fails.
func Jobs(rs []db.JobQueue) ([]runledger.Job, error) {
	out := make([]runledger.Job, 0, len(rs))
	for _, r := range rs {
		j, err := Job(r)
		if err != nil {
			return nil, err
		}
		out = append(out, j)
	}
	return out, nil
}

// Event converts a job_events row.
func Event(r db.JobEvent) (runledger.JobEvent, error) {
	typ, err := runledger.ParseJobEventType(string(r.EventType))
	if err != nil {
		return runledger.JobEvent{}, err
	}
	var stage *runledger.JobStage
	if r.Stage != nil {
		s, err := runledger.ParseJobStage(*r.Stage)
		if err != nil {
			return runledger.JobEvent{}, err
		}
		stage = &s
	}
	return runledger.JobEvent{
		ID:            r.ID,
		JobID:         r.JobID,
		RunNumber:     r.RunNumber,
		Attempt:       r.Attempt,
		EventType:     typ,
		Stage:         stage,
		ProgressDone:  r.ProgressDone,
		ProgressTotal: r.ProgressTotal,
		Payload:       rawJSON(r.Payload),
		OccurredAt:    r.OccurredAt.UTC(),
	}, nil
}

// Status converts a job_status enum value.
func Status(s db.JobStatus) (runledger.JobStatus, error) {
	return runledger.ParseJobStatus(string(s))
}

func rawJSON(b []byte) json.RawMessage {
	if b == nil {
		return nil
	}
	return json.RawMessage(b)
}

func utcPtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}
