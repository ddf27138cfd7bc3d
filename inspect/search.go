package inspect

import (
	"context"
	"errors"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/db"
	"github.com/runledger-go/runledger/internal/dberr"
	"github.com/runledger-go/runledger/internal/rows"
	"github.com/runledger-go/runledger/internal/txn"
	"github.com/runledger-go/runledger/internal/validate"
)

// SearchRequest lists the jobs matching a filter, newest first, a page at
// a time: an operator's search (the console's job list). Every filter left
// at its zero value matches every job.
type SearchRequest struct {
	// Scope, when set, keeps one tenant's jobs (runledger.Global() is the
	// global scope's own); nil searches every tenant.
	Scope *runledger.Scope
	// Status, when set, keeps jobs in that status.
	Status *runledger.JobStatus
	// JobType and ErrorCode, when not "", keep jobs of that type and whose
	// last_error_code is that code.
	JobType   string
	ErrorCode string
	// FinishedSince and FinishedUntil, when set, keep jobs with
	// finished_at in [FinishedSince, FinishedUntil); a job that has not
	// finished matches neither.
	FinishedSince, FinishedUntil *time.Time
	// Limit is the page size, 1 to runledger.MaxLimit.
	Limit int
	// Before continues after a previous page (its Next); nil starts at the
	// newest job.
	Before *Cursor
}

// Validate checks the request without touching the database: the scope
// (job.organization_invalid), limit (job.list_limit_invalid), status a
// job_status value and since before until (job.list_filter_invalid), job
// type (job.job_type_blank, job.job_type_invalid) and error code
// (job.list_filter_invalid: blank, NUL, invalid UTF-8 or over 255 bytes).
func (r SearchRequest) Validate() error {
	if r.Scope != nil {
		if err := validate.Scope(*r.Scope); err != nil {
			return err
		}
	}
	if err := validate.Limit(r.Limit, errListLimitInvalid, "list limit"); err != nil {
		return err
	}
	if r.Status != nil {
		if _, err := rows.ParseStatus(string(*r.Status)); err != nil {
			return validate.Invalid(errListFilterInvalid, "status %q is not a job status", *r.Status)
		}
	}
	if r.JobType != "" {
		if err := validate.JobType(r.JobType); err != nil {
			return err
		}
	}
	if r.ErrorCode != "" && validate.Text(r.ErrorCode, 255) != validate.OK {
		return validate.Invalid(errListFilterInvalid, "error code filter of %d bytes is blank, holds NUL or invalid UTF-8, or is too long", len(r.ErrorCode))
	}
	if r.FinishedSince != nil && r.FinishedUntil != nil && !r.FinishedSince.Before(*r.FinishedUntil) {
		return validate.Invalid(errListFilterInvalid, "finished-since %s is not before finished-until %s", r.FinishedSince, r.FinishedUntil)
	}
	return nil
}

// Search lists the jobs matching the request newest first (created_at,
// then id), a page at a time with the keyset cursor of List, so jobs
// inserted meanwhile never shift a page and no page counts the history.
// Its cost grows with how far back the page's matches lie: a filter that
// matches few jobs reads further. No lock; each page is its own snapshot.
func Search(ctx context.Context, q Querier, req SearchRequest) (Page, error) {
	q = txn.Wrap(q)
	if err := req.Validate(); err != nil {
		return Page{}, err
	}
	p := db.JobListFilteredParams{
		FinishedSince: req.FinishedSince, FinishedUntil: req.FinishedUntil, MaxJobs: int32(req.Limit),
	}
	if req.Scope != nil {
		org := rows.Tenant(*req.Scope)
		p.OrganizationID = &org
	}
	if req.Status != nil {
		st := db.JobStatus(*req.Status)
		p.Status = &st
	}
	if req.JobType != "" {
		p.JobType = &req.JobType
	}
	if req.ErrorCode != "" {
		p.ErrorCode = &req.ErrorCode
	}
	p.BeforeCreatedAt, p.BeforeID = cursorArgs(req.Before)
	rs, err := queries.JobListFiltered(ctx, q, p)
	if err != nil {
		return Page{}, dberr.Translate(ctx, "search jobs", err)
	}
	return page(rs, req.Limit, true)
}

// Locate returns the scope of the job with an id, whatever its tenant: an
// operator read, for a caller that knows only the id and then reads in
// that scope (on Citus it asks every shard). No job with the id is
// runledger.CodeJobNotFound. No lock.
func Locate(ctx context.Context, q Querier, id uuid.UUID) (runledger.Scope, error) {
	q = txn.Wrap(q)
	tenant, err := queries.JobGetTenant(ctx, q, id)
	if errors.Is(err, pgx.ErrNoRows) {
		return runledger.Scope{}, rows.JobNotFound(id, runledger.Global())
	}
	if err != nil {
		return runledger.Scope{}, dberr.Translate(ctx, "locate job", err)
	}
	return rows.ScopeOfTenant(tenant), nil
}
