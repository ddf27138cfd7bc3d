package jobs

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runledger-go/runledger/db"
	"github.com/runledger-go/runledger/internal/dberr"
	"github.com/runledger-go/runledger/internal/errs"
	"github.com/runledger-go/runledger/internal/txn"
	"github.com/runledger-go/runledger/internal/validate"
)

// DefinitionInput creates a job type or changes its settings. A nil setting
// keeps the stored value; on insert it takes the column default (8
// attempts, 900 seconds, priority 100, enabled).
type DefinitionInput struct {
	// JobType names the type; it must be non-blank and is stored as given.
	JobType string
	// MaxAttempts is how many attempts a job of this type gets by default
	// (> 0).
	MaxAttempts *int32
	// TimeoutSeconds is the default per-attempt timeout (> 0).
	TimeoutSeconds *int32
	// Priority is the default priority; higher is claimed first. Any value.
	Priority *int32
	// Enabled says whether new jobs of this type may be enqueued (or
	// replayed). Disabling a type does not touch jobs that exist.
	Enabled *bool
}

// Validate checks the input without touching the database: job type
// non-blank (job.job_type_blank), clean (job.job_type_invalid) and at most
// runledger.MaxJobTypeBytes (job.job_type_too_long), max
// attempts positive (job.max_attempts_invalid), timeout positive
// (job.timeout_invalid).
func (in DefinitionInput) Validate() error {
	if err := validate.JobType(in.JobType); err != nil {
		return err
	}
	if in.MaxAttempts != nil && *in.MaxAttempts <= 0 {
		return validate.Invalid(errMaxAttemptsInvalid, "max attempts must be positive, got %d", *in.MaxAttempts)
	}
	if in.TimeoutSeconds != nil && *in.TimeoutSeconds <= 0 {
		return validate.Invalid(errTimeoutInvalid, "timeout seconds must be positive, got %d", *in.TimeoutSeconds)
	}
	return nil
}

// Definition is a job type's stored settings. Version starts at 1 and goes
// up by one whenever an upsert actually changes a setting.
type Definition struct {
	JobType               string `json:"job_type"`
	Version               int32  `json:"version"`
	MaxAttempts           int32  `json:"max_attempts"`
	DefaultTimeoutSeconds int32  `json:"default_timeout_seconds"`
	DefaultPriority       int32  `json:"default_priority"`
	Enabled               bool   `json:"enabled"`
	// Paused says whether claims pass this type's jobs over (PauseType);
	// they stay PENDING and enqueues are still accepted.
	Paused    bool      `json:"paused"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

func definitionFromRow(r db.JobDefinition) Definition {
	return Definition{
		JobType:               r.JobType,
		Version:               r.Version,
		MaxAttempts:           r.MaxAttempts,
		DefaultTimeoutSeconds: r.DefaultTimeoutSeconds,
		DefaultPriority:       r.DefaultPriority,
		Enabled:               r.IsEnabled,
		Paused:                r.IsPaused,
		CreatedAt:             r.CreatedAt.UTC(),
		UpdatedAt:             r.UpdatedAt.UTC(),
	}
}

// UpsertDefinition creates or updates a job type in one statement on the
// pool and returns the stored definition. Nil settings keep what is stored.
// The version rises only when a setting changes, so repeating an upsert is
// harmless (UpdatedAt still moves). Changing an existing type waits for
// transactions that hold its row FOR SHARE, i.e. enqueues and replays of
// that type in flight; jobs already enqueued keep the settings they were
// given.
func UpsertDefinition(ctx context.Context, pool *pgxpool.Pool, in DefinitionInput) (Definition, error) {
	return txn.Validated(ctx, pool, in, upsertDefinition)
}

// UpsertDefinitionTx is UpsertDefinition inside the caller's transaction,
// which it never commits or rolls back. The definition row stays locked
// until that transaction ends, so enqueues of the type wait for it.
func UpsertDefinitionTx(ctx context.Context, tx pgx.Tx, in DefinitionInput) (Definition, error) {
	return txn.Validated(ctx, tx, in, upsertDefinition)
}

func upsertDefinition(ctx context.Context, q db.DBTX, in DefinitionInput) (Definition, error) {
	q = txn.Wrap(q)
	row, err := queries.JobDefinitionUpsert(ctx, q, db.JobDefinitionUpsertParams{
		JobType:               in.JobType,
		MaxAttempts:           in.MaxAttempts,
		DefaultTimeoutSeconds: in.TimeoutSeconds,
		DefaultPriority:       in.Priority,
		IsEnabled:             in.Enabled,
	})
	if err != nil {
		return Definition{}, dberr.Translate(ctx, "upsert job definition", err)
	}
	return definitionFromRow(row), nil
}

// GetDefinition reads one job type's definition, enabled or not. A type
// with no definition is runledger.CodeDefinitionMissing (NotFound). The job
// type is validated like DefinitionInput.JobType first. No lock.
func GetDefinition(ctx context.Context, q Querier, jobType string) (Definition, error) {
	q = txn.Wrap(q)
	if err := validate.JobType(jobType); err != nil {
		return Definition{}, err
	}
	row, err := queries.JobDefinitionGetByJobType(ctx, q, jobType)
	if errors.Is(err, pgx.ErrNoRows) {
		return Definition{}, errs.DefinitionMissing.Newf("no job definition for type %q", jobType)
	}
	if err != nil {
		return Definition{}, dberr.Translate(ctx, "get job definition", err)
	}
	return definitionFromRow(row), nil
}

// ListDefinitions returns every job type's definition ordered by type, an
// empty (non-nil) slice when there are none. No lock.
func ListDefinitions(ctx context.Context, q Querier) ([]Definition, error) {
	q = txn.Wrap(q)
	rs, err := queries.JobDefinitionList(ctx, q)
	if err != nil {
		return nil, dberr.Translate(ctx, "list job definitions", err)
	}
	out := make([]Definition, 0, len(rs))
	for _, r := range rs {
		out = append(out, definitionFromRow(r))
	}
	return out, nil
}

// PauseType pauses a job type: from the next claim on (a worker's within
// its poll interval), no claim leases a job of the type; its jobs stay
// PENDING, enqueues and replays of it are still accepted, and jobs
// already leased run to their end. The pause is a column of the
// definition, so it lasts across restarts until ResumeType. Pausing a
// paused type changes nothing. A type with no definition is
// runledger.CodeDefinitionMissing (NotFound); the job type is validated
// like DefinitionInput.JobType first. One statement, which waits for
// transactions holding the definition FOR SHARE (enqueues in flight).
func PauseType(ctx context.Context, q Querier, jobType string) (Definition, error) {
	return setPaused(ctx, q, jobType, true)
}

// ResumeType ends a pause (PauseType): the next claims lease the type's
// due jobs again, in the usual claim order. Resuming a type that is not
// paused changes nothing; the errors are PauseType's.
func ResumeType(ctx context.Context, q Querier, jobType string) (Definition, error) {
	return setPaused(ctx, q, jobType, false)
}

func setPaused(ctx context.Context, q Querier, jobType string, paused bool) (Definition, error) {
	q = txn.Wrap(q)
	if err := validate.JobType(jobType); err != nil {
		return Definition{}, err
	}
	row, err := queries.JobDefinitionSetPaused(ctx, q, db.JobDefinitionSetPausedParams{JobType: jobType, IsPaused: paused})
	if errors.Is(err, pgx.ErrNoRows) {
		return Definition{}, errs.DefinitionMissing.Newf("no job definition for type %q", jobType)
	}
	if err != nil {
		return Definition{}, dberr.Translate(ctx, "set job type paused", err)
	}
	return definitionFromRow(row), nil
}
