// Package rows turns generated db rows into runledger domain values,
// decoding enums and stages strictly: an unknown value is an Internal error,
// never a silent default. It also holds RequireJob, the scoped existence
// check that every read whose result came back empty runs.
package rows

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/db"
	"github.com/runledger-go/runledger/internal/dberr"
	"github.com/runledger-go/runledger/internal/errs"
)

// Kinds of a persisted value this code cannot decode (Internal): the
// database and this code disagree.
var (
	invalidStatus    = errs.Internal("job.invalid_status", "Job status in persisted row is invalid.")
	invalidStage     = errs.Internal("job.invalid_stage", "Job stage in persisted row is invalid.")
	invalidEventType = errs.Internal("job.invalid_event_type", "Job event type in persisted row is invalid.")
)

// ParseStatus returns the status spelled s, or the Internal error
// job.invalid_status when s is not one.
func ParseStatus(s string) (runledger.JobStatus, error) {
	switch st := runledger.JobStatus(s); st {
	case runledger.JobStatusPending, runledger.JobStatusLeased, runledger.JobStatusSucceeded,
		runledger.JobStatusDeadLettered, runledger.JobStatusCanceled:
		return st, nil
	}
	return "", invalidStatus.Newf("decode job status: unknown value %q", s)
}

// ParseStage returns the stage spelled s, or the Internal error
// job.invalid_stage when s is not one.
func ParseStage(s string) (runledger.JobStage, error) {
	switch st := runledger.JobStage(s); st {
	case runledger.JobStageQueued, runledger.JobStageScheduled, runledger.JobStageRunning,
		runledger.JobStageCompleted:
		return st, nil
	}
	return "", invalidStage.Newf("decode job stage: unknown value %q", s)
}

// ParseEventType returns the event type spelled s, or the Internal error
// job.invalid_event_type when s is not one.
func ParseEventType(s string) (runledger.JobEventType, error) {
	switch t := runledger.JobEventType(s); t {
	case runledger.JobEventEnqueued, runledger.JobEventLeased, runledger.JobEventHeartbeat,
		runledger.JobEventStageChanged, runledger.JobEventProgress, runledger.JobEventRetryScheduled,
		runledger.JobEventSucceeded, runledger.JobEventFailed, runledger.JobEventDeadLettered,
		runledger.JobEventCanceled, runledger.JobEventRequeued:
		return t, nil
	}
	return "", invalidEventType.Newf("decode job event type: unknown value %q", s)
}

// The global scope is stored as the nil UUID in organization_id (NOT
// NULL, so that every key and distribution can lead with it); Go sees it as
// runledger.Global() and a nil Job.OrganizationID. The translation is here
// and nowhere else.

// Tenant returns what organization_id stores for scope: its organization,
// or the nil UUID for the global scope.
func Tenant(scope runledger.Scope) uuid.UUID {
	org, _ := scope.OrganizationID()
	return org
}

// ScopeOfTenant returns the scope an organization_id value stores.
func ScopeOfTenant(tenant uuid.UUID) runledger.Scope {
	if tenant == uuid.Nil {
		return runledger.Global()
	}
	return runledger.Organization(tenant)
}

// orgPtr returns a stored organization_id as Job.OrganizationID: nil for
// the global scope.
func orgPtr(tenant uuid.UUID) *uuid.UUID {
	if tenant == uuid.Nil {
		return nil
	}
	return &tenant
}

// Job converts a job_queue row. Times become UTC.
func Job(r db.JobQueue) (runledger.Job, error) {
	return checked(runledger.Job{
		ID:                   r.ID,
		JobType:              r.JobType,
		OrganizationID:       orgPtr(r.OrganizationID),
		Payload:              rawJSON(r.Payload),
		Status:               runledger.JobStatus(r.Status),
		Priority:             r.Priority,
		RunNumber:            r.RunNumber,
		Attempt:              r.Attempt,
		MaxAttempts:          r.MaxAttempts,
		TimeoutSeconds:       r.TimeoutSeconds,
		NextRunAt:            r.NextRunAt,
		LeaseExpiresAt:       r.LeaseExpiresAt,
		LastHeartbeatAt:      r.LastHeartbeatAt,
		WorkerID:             r.WorkerID,
		StartedAt:            r.StartedAt,
		FinishedAt:           r.FinishedAt,
		Stage:                runledger.JobStage(r.Stage),
		ProgressDone:         r.ProgressDone,
		ProgressTotal:        r.ProgressTotal,
		ProgressPct:          r.ProgressPct,
		Checkpoint:           rawJSON(r.Checkpoint),
		Output:               rawJSON(r.Output),
		IdempotencyKey:       r.IdempotencyKey,
		StatusReason:         r.StatusReason,
		LastErrorCode:        r.LastErrorCode,
		LastErrorMessage:     r.LastErrorMessage,
		CreatedAt:            r.CreatedAt,
		UpdatedAt:            r.UpdatedAt,
		ExecutionResourceKey: r.ExecutionResourceKey,
	})
}

// JobJSON converts a job_queue row read as one jsonb value (to_jsonb of the
// row with its timestamps in UTC, RFC 3339): its keys are the column names,
// which runledger.Job's JSON fields spell the same way; enqueue_request is
// not part of the record and is skipped. A NULL jsonb column arrives as
// JSON null and becomes nil, as Job gives it. Times become UTC.
func JobJSON(raw []byte) (runledger.Job, error) {
	var j runledger.Job
	if err := json.Unmarshal(raw, &j); err != nil {
		return runledger.Job{}, errs.Invariantf("decode job row: %v", err)
	}
	j.Payload, j.Checkpoint, j.Output = nullJSON(j.Payload), nullJSON(j.Checkpoint), nullJSON(j.Output)
	if j.OrganizationID != nil {
		j.OrganizationID = orgPtr(*j.OrganizationID)
	}
	return checked(j)
}

// checked validates a decoded job's status and stage and puts its times in
// UTC: the one place every job row passes through.
func checked(j runledger.Job) (runledger.Job, error) {
	var err error
	if j.Status, err = ParseStatus(string(j.Status)); err != nil {
		return runledger.Job{}, err
	}
	if j.Stage, err = ParseStage(string(j.Stage)); err != nil {
		return runledger.Job{}, err
	}
	j.NextRunAt = j.NextRunAt.UTC()
	j.LeaseExpiresAt = utcPtr(j.LeaseExpiresAt)
	j.LastHeartbeatAt = utcPtr(j.LastHeartbeatAt)
	j.StartedAt = utcPtr(j.StartedAt)
	j.FinishedAt = utcPtr(j.FinishedAt)
	j.CreatedAt = j.CreatedAt.UTC()
	j.UpdatedAt = j.UpdatedAt.UTC()
	return j, nil
}

// All converts rs in order with convert, stopping at the first error. No
// rows give an empty, non-nil slice.
func All[R, T any](rs []R, convert func(R) (T, error)) ([]T, error) {
	out := make([]T, 0, len(rs))
	for _, r := range rs {
		v, err := convert(r)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

// RequireJob returns runledger.CodeJobNotFound unless job id exists in
// scope. A read whose list came back empty uses it to tell "nothing yet"
// from "no such job in your scope". No lock.
func RequireJob(ctx context.Context, q db.DBTX, scope runledger.Scope, id uuid.UUID) error {
	_, err := queries.JobGetByID(ctx, q, db.JobGetByIDParams{ID: id, OrganizationID: Tenant(scope)})
	if errors.Is(err, pgx.ErrNoRows) {
		return JobNotFound(id, scope)
	}
	if err != nil {
		return dberr.Translate(ctx, "get job", err)
	}
	return nil
}

// JobNotFound is the NotFound error of job id, absent from scope.
func JobNotFound(id uuid.UUID, scope runledger.Scope) error {
	return errs.JobNotFound.Newf("job %s not found in scope %s", id, scope)
}

var queries = db.New()

// Event converts a job_events row.
func Event(r db.JobEvent) (runledger.JobEvent, error) {
	typ, err := ParseEventType(string(r.EventType))
	if err != nil {
		return runledger.JobEvent{}, err
	}
	var stage *runledger.JobStage
	if r.Stage != nil {
		s, err := ParseStage(*r.Stage)
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
	return ParseStatus(string(s))
}

func rawJSON(b []byte) json.RawMessage {
	if b == nil {
		return nil
	}
	return json.RawMessage(b)
}

// nullJSON maps a nested JSON null (a NULL jsonb column) to nil.
func nullJSON(m json.RawMessage) json.RawMessage {
	if len(m) == 0 || bytes.Equal(m, []byte("null")) {
		return nil
	}
	return m
}

func utcPtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}
