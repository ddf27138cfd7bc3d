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

// Get reads one job in the caller's exact scope. A job that does not exist,
// or exists in another scope, is runledger.CodeJobNotFound. No lock.
func Get(ctx context.Context, q Querier, scope runledger.Scope, id uuid.UUID) (runledger.Job, error) {
	if err := validate.Scope(scope); err != nil {
		return runledger.Job{}, err
	}
	q = txn.Wrap(q)
	row, err := queries.JobGetByID(ctx, q, db.JobGetByIDParams{ID: id, OrganizationID: rows.Tenant(scope)})
	if errors.Is(err, pgx.ErrNoRows) {
		return runledger.Job{}, rows.JobNotFound(id, scope)
	}
	if err != nil {
		return runledger.Job{}, dberr.Translate(ctx, "get job", err)
	}
	return rows.Job(row)
}

// Events returns a job's whole history in the order it happened (by run,
// then as written). A job outside the caller's scope is
// runledger.CodeJobNotFound; a job with no events (only possible for rows
// written by hand) gives an empty, non-nil slice. When the history is empty
// a second read checks the job. No lock.
func Events(ctx context.Context, q Querier, scope runledger.Scope, id uuid.UUID) ([]runledger.JobEvent, error) {
	if err := validate.Scope(scope); err != nil {
		return nil, err
	}
	q = txn.Wrap(q)
	rs, err := queries.JobEventListForJob(ctx, q, db.JobEventListForJobParams{JobID: id, OrganizationID: rows.Tenant(scope)})
	if err != nil {
		return nil, dberr.Translate(ctx, "list job events", err)
	}
	return scopedEvents(ctx, q, scope, id, rs, func(r db.JobEventListForJobRow) db.JobEvent { return r.JobEvent })
}

// scopedEvents converts the events a scoped read returned; when there are
// none it checks that the job exists in scope, so an out-of-scope job is
// runledger.CodeJobNotFound rather than an empty history.
func scopedEvents[R any](ctx context.Context, q Querier, scope runledger.Scope, id uuid.UUID, rs []R, event func(R) db.JobEvent) ([]runledger.JobEvent, error) {
	if len(rs) == 0 {
		if err := rows.RequireJob(ctx, q, scope, id); err != nil {
			return nil, err
		}
	}
	return rows.All(rs, func(r R) (runledger.JobEvent, error) { return rows.Event(event(r)) })
}

// NewestEvents returns a job's newest limit (1 to runledger.MaxLimit, else
// job.event_limit_invalid) events, newest first. Scope and empty results
// behave as in Events. No lock.
func NewestEvents(ctx context.Context, q Querier, scope runledger.Scope, id uuid.UUID, limit int) ([]runledger.JobEvent, error) {
	q = txn.Wrap(q)
	if err := validate.Scope(scope); err != nil {
		return nil, err
	}
	if err := validate.Limit(limit, errEventLimitInvalid, "event limit"); err != nil {
		return nil, err
	}
	rs, err := queries.JobEventListNewestForJob(ctx, q, db.JobEventListNewestForJobParams{
		JobID: id, OrganizationID: rows.Tenant(scope), MaxEvents: int32(limit),
	})
	if err != nil {
		return nil, dberr.Translate(ctx, "list newest job events", err)
	}
	return scopedEvents(ctx, q, scope, id, rs, func(r db.JobEventListNewestForJobRow) db.JobEvent { return r.JobEvent })
}

// RecentEventsByType returns the newest limit (1 to runledger.MaxLimit, else
// job.event_limit_invalid) events of one type that occurred at or after
// since, newest first, across every scope: an operator read, not for
// tenant-facing callers. An event type that is not a job_event_type value
// is job.event_filter_invalid. No lock.
func RecentEventsByType(ctx context.Context, q Querier, eventType runledger.JobEventType, since time.Time, limit int) ([]runledger.JobEvent, error) {
	q = txn.Wrap(q)
	if _, err := rows.ParseEventType(string(eventType)); err != nil {
		return nil, validate.Invalid(errEventFilterInvalid, "event type %q is not a job event type", eventType)
	}
	if err := validate.Limit(limit, errEventLimitInvalid, "event limit"); err != nil {
		return nil, err
	}
	rs, err := queries.JobEventListRecentByType(ctx, q, db.JobEventListRecentByTypeParams{
		EventType: db.JobEventType(eventType), Since: since, MaxEvents: int32(limit),
	})
	if err != nil {
		return nil, dberr.Translate(ctx, "list recent job events by type", err)
	}
	return rows.All(rs, rows.Event)
}

// Cursor marks a position in a newest-first job listing: the created_at
// and id of the last job of the previous page. Pass a Page's Next as the
// next request's Before.
type Cursor struct {
	CreatedAt time.Time `json:"created_at"`
	ID        uuid.UUID `json:"id"`
}

// Page is one page of a job listing.
type Page struct {
	// Jobs are newest first (created_at, then id, descending).
	Jobs []runledger.Job `json:"jobs"`
	// Next is the cursor for the following page, nil when this page is the
	// last one (it held fewer jobs than the limit) or the listing has no
	// cursor (status listings). A full last page yields a Next whose page
	// is empty.
	Next *Cursor `json:"next"`
}

// ListRequest lists one scope's jobs.
type ListRequest struct {
	Scope runledger.Scope
	// Status, when set, lists only jobs in that status: the newest Limit
	// of them, in one page (no cursor; Before must be nil).
	Status *runledger.JobStatus
	// Limit is the page size, 1 to runledger.MaxLimit.
	Limit int
	// Before continues a listing after a previous page; nil starts at the
	// newest job.
	Before *Cursor
}

// Validate checks the request without touching the database: scope
// (job.organization_invalid), limit (job.list_limit_invalid), status a
// job_status value and no cursor with a status (job.list_filter_invalid).
func (r ListRequest) Validate() error {
	if err := validate.Scope(r.Scope); err != nil {
		return err
	}
	if err := validate.Limit(r.Limit, errListLimitInvalid, "list limit"); err != nil {
		return err
	}
	return validateStatusFilter(r.Status, r.Before)
}

func validateStatusFilter(status *runledger.JobStatus, before *Cursor) error {
	if status == nil {
		return nil
	}
	if _, err := rows.ParseStatus(string(*status)); err != nil {
		return validate.Invalid(errListFilterInvalid, "status %q is not a job status", *status)
	}
	if before != nil {
		return validate.Invalid(errListFilterInvalid, "a status listing has a single page and takes no cursor")
	}
	return nil
}

// List lists the jobs of the caller's scope newest first, a page at a time
// (keyset pagination on created_at and id, so jobs inserted meanwhile never
// shift a page), or, with a Status, the newest Limit jobs in that status.
// No lock; each page is its own snapshot.
func List(ctx context.Context, q Querier, req ListRequest) (Page, error) {
	q = txn.Wrap(q)
	if err := req.Validate(); err != nil {
		return Page{}, err
	}
	org := rows.Tenant(req.Scope)
	limit := int32(req.Limit)
	var (
		rs  []db.JobQueue
		err error
	)
	if req.Status != nil {
		rs, err = queries.JobListByStatus(ctx, q, db.JobListByStatusParams{OrganizationID: org, Status: db.JobStatus(*req.Status), MaxJobs: limit})
	} else {
		at, id := cursorArgs(req.Before)
		rs, err = queries.JobListPage(ctx, q, db.JobListPageParams{OrganizationID: org, BeforeCreatedAt: at, BeforeID: id, MaxJobs: limit})
	}
	if err != nil {
		return Page{}, dberr.Translate(ctx, "list jobs", err)
	}
	return page(rs, req.Limit, req.Status == nil)
}

// ListAllRequest lists jobs across every scope (operators only).
type ListAllRequest struct {
	// JobType and Status, set together, list the newest Limit jobs of that
	// type in that status, in one page (Before must be nil). Left both
	// empty, every job is listed page by page. One without the other is
	// job.list_filter_invalid.
	JobType string
	Status  *runledger.JobStatus
	// Limit is the page size, 1 to runledger.MaxLimit.
	Limit int
	// Before continues a listing after a previous page.
	Before *Cursor
}

// Validate checks the request without touching the database: limit
// (job.list_limit_invalid), the filter combination and status
// (job.list_filter_invalid), the job type (job.job_type_blank,
// job.job_type_invalid).
func (r ListAllRequest) Validate() error {
	if err := validate.Limit(r.Limit, errListLimitInvalid, "list limit"); err != nil {
		return err
	}
	if (r.JobType == "") != (r.Status == nil) {
		return validate.Invalid(errListFilterInvalid, "job type and status filter only together")
	}
	if r.JobType != "" {
		if err := validate.JobType(r.JobType); err != nil {
			return err
		}
	}
	return validateStatusFilter(r.Status, r.Before)
}

// ListAll lists jobs of every scope newest first, a page at a time, or
// with JobType and Status the newest Limit jobs of that type in that
// status. An operator read: it ignores tenancy. No lock.
func ListAll(ctx context.Context, q Querier, req ListAllRequest) (Page, error) {
	q = txn.Wrap(q)
	if err := req.Validate(); err != nil {
		return Page{}, err
	}
	var (
		rs  []db.JobQueue
		err error
	)
	if req.Status != nil {
		rs, err = queries.JobListByTypeAndStatus(ctx, q, db.JobListByTypeAndStatusParams{
			JobType: req.JobType, Status: db.JobStatus(*req.Status), MaxJobs: int32(req.Limit),
		})
	} else {
		at, id := cursorArgs(req.Before)
		rs, err = queries.JobListPageAll(ctx, q, db.JobListPageAllParams{BeforeCreatedAt: at, BeforeID: id, MaxJobs: int32(req.Limit)})
	}
	if err != nil {
		return Page{}, dberr.Translate(ctx, "list all jobs", err)
	}
	return page(rs, req.Limit, req.Status == nil)
}

func cursorArgs(c *Cursor) (*time.Time, *uuid.UUID) {
	if c == nil {
		return nil, nil
	}
	at, id := c.CreatedAt, c.ID
	return &at, &id
}

func page(rs []db.JobQueue, limit int, paged bool) (Page, error) {
	jobs, err := rows.All(rs, rows.Job)
	if err != nil {
		return Page{}, err
	}
	p := Page{Jobs: jobs}
	if paged && len(jobs) == limit {
		last := jobs[len(jobs)-1]
		p.Next = &Cursor{CreatedAt: last.CreatedAt, ID: last.ID}
	}
	return p, nil
}
