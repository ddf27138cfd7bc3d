package requeue

import (
	"context"
	"iter"
	"math"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/db"
	"github.com/runledger-go/runledger/internal/bulk"
	"github.com/runledger-go/runledger/internal/dberr"
	"github.com/runledger-go/runledger/internal/errs"
	"github.com/runledger-go/runledger/internal/rows"
	"github.com/runledger-go/runledger/internal/txn"
	"github.com/runledger-go/runledger/internal/validate"
)

// Bulk compare-and-requeue: one reason and one state policy for a whole
// selection of jobs, each getting the single requeue's semantics, chunk
// by chunk on the bulk engine (internal/bulk) that bulk replay runs on.

// DefaultBulkChunk is the number of jobs per transaction when
// BulkRequest.ChunkSize is 0.
const DefaultBulkChunk = 1000

// maxJobTypeBytes is the longest job type a filter accepts, as
// runledger.MaxJobTypeBytes; maxErrorCodeBytes the longest error code.
const (
	maxJobTypeBytes   = 255
	maxErrorCodeBytes = 255
)

// The bulk-request validation errors, all category Validation. A bulk
// request's reason, scope and state policy fail with the single
// requeue's codes.
var (
	errBulkSelection = errs.Validation("job.requeue_bulk_selection_invalid",
		"Bulk requeue needs exactly one selection: a list of jobs or a filter.")
	errBulkSourcesEmpty = errs.Validation("job.requeue_bulk_sources_empty",
		"Bulk requeue job list is empty.")
	errBulkDuplicate = errs.Validation("job.requeue_bulk_duplicate_source",
		"Bulk requeue job list names a job twice.")
	errBulkRange = errs.Validation("job.requeue_bulk_range_invalid",
		"Bulk requeue finished-since time must be before the finished-until time.")
	errBulkLimit = errs.Validation("job.requeue_bulk_limit_invalid",
		"Bulk requeue limit must be positive.")
	errBulkChunk = errs.Validation("job.requeue_bulk_chunk_invalid",
		"Bulk requeue chunk size must be positive.")
	errBulkRate = errs.Validation("job.requeue_bulk_rate_invalid",
		"Bulk requeue rate must be positive.")
	errBulkJobType = errs.Validation("job.job_type_invalid",
		"Job type must be valid UTF-8 without NUL bytes.")
	errBulkJobTypeBlank = errs.Validation("job.job_type_blank",
		"Job type must not be blank.")
	errBulkJobTypeTooLong = errs.Validation("job.job_type_too_long",
		"Job type is too long (at most 255 bytes).")
	errBulkErrorCode = errs.Validation("job.requeue_bulk_error_code_invalid",
		"Bulk requeue error code must be non-blank, valid UTF-8 without NUL bytes, at most 255 bytes.")
)

// ErrBulkStopped is what Bulk's error matches (errors.Is) when
// BulkRequest.Stop ended the action before its selection was done.
var ErrBulkStopped = bulk.ErrStopped

// BulkRequest is one bulk action: one reason and state policy for every
// job it selects, by an explicit list (Sources, or Stream for a list too
// long to hold in memory) or by a filter: exactly one of Sources, Stream
// and Filter.
type BulkRequest struct {
	// Scope is the caller's tenant, for both selections: a job outside it
	// is not_found (list) or never selected (filter).
	Scope runledger.Scope
	// Reason is validated like Request's and recorded for every job;
	// running the same action again (same reason) reports the jobs it
	// already requeued existing and requeues only what is missing.
	Reason string
	// StatePolicy keeps (the default) or clears every job's progress and
	// checkpoint.
	StatePolicy StatePolicy
	// Operator, when not "", names who asked for the action; every
	// REQUEUED event records it as "operator" (as Request's).
	Operator string
	// Sources is an explicit list, requeued in this order; a job id twice
	// is a validation error.
	Sources []Source
	// Stream is an explicit list read as the action goes, a chunk at a
	// time, so that memory stays bounded by the chunk size whatever its
	// length. A job listed twice in one chunk stops the action with
	// job.requeue_bulk_duplicate_source when that chunk is formed (the
	// chunks before stay committed); twice in different chunks it is done
	// twice (the second time existing, or a mismatch). An error it yields
	// stops the action before the chunk being formed. Check the list first
	// (the command line does) when bad input must write nothing.
	Stream iter.Seq2[Source, error]
	// Filter selects the jobs instead.
	Filter *Filter
	// ChunkSize is the number of jobs per transaction; 0 means
	// DefaultBulkChunk. With a Rate below it, chunks hold Rate jobs.
	ChunkSize int
	// Rate is at most how many jobs are requeued per second; 0 means
	// unlimited (the bulk engine's token bucket, as bulk replay's).
	Rate int
	// DryRun runs each chunk's statements and rolls the chunk back:
	// results and totals are what a real run would report at that moment,
	// and nothing is written.
	DryRun bool
	// Count, for a filter, counts the whole selection in the first chunk's
	// transaction, under the same bounds (BulkChunk.Expected). Ignored for
	// a list.
	Count bool
	// Stop, once closed, stops the action softly: the chunk in flight
	// commits (or, in a dry run, rolls back) and is reported, no other
	// chunk begins, and Bulk returns an error matching ErrBulkStopped.
	// nil never stops. To stop at once instead, cancel ctx.
	Stop <-chan struct{}
}

// Source is one job of a list, as the caller observed it (as Request's
// JobID, ExpectedStatus and ExpectedRunNumber).
type Source struct {
	JobID             uuid.UUID
	ExpectedStatus    Status
	ExpectedRunNumber int32
}

// Filter selects the jobs in the request's scope that are in Status and
// finished within [FinishedSince, FinishedUntil), of JobType and with
// last error ErrorCode when those are set, in finish order (then id).
// The expected status and run of each are those it has when its chunk
// selects it; jobs without a finish time are never selected.
type Filter struct {
	// Status is required: DeadLettered or Canceled.
	Status Status
	// JobType and ErrorCode, when not "", keep only jobs of that type and
	// whose last_error_code is that code.
	JobType   string
	ErrorCode string
	// FinishedSince, when set, keeps jobs with finished_at >= it.
	FinishedSince *time.Time
	// FinishedUntil, when set, keeps jobs with finished_at < it; with both
	// set, since must be before until. When nil, the action pins it to the
	// database's time (now()) at its first page and uses it for every
	// page, reporting it as BulkChunk.FinishedUntil: jobs that finish while
	// the action runs (requeued ones that fail again among them) are not
	// selected.
	FinishedUntil *time.Time
	// Limit caps the number of jobs selected; 0 means no cap.
	Limit int
}

// BulkResult is one job's outcome.
type BulkResult struct {
	JobID uuid.UUID
	// RunNumber is the expected run (list) or the run the job had when
	// selected (filter): the run requeued, or refused.
	RunNumber int32
	Result    BulkOutcome
}

// BulkOutcome is what happened to one job: the verdict the single requeue
// would have given it at that moment. Requeued or Existing for Requeued
// (Inserted, Existing), Mismatch for ExpectationMismatch, NotFound for
// NotFound, NotQuiesced for NotQuiesced, and WorkflowManaged for the error
// job.workflow_requeue_not_supported, which here refuses one job and the
// action goes on.
type BulkOutcome string

// The outcomes; the strings are the JSON spellings of the command line.
const (
	BulkRequeued        BulkOutcome = "requeued"
	BulkExisting        BulkOutcome = "existing"
	BulkMismatch        BulkOutcome = "mismatch"
	BulkNotFound        BulkOutcome = "not_found"
	BulkWorkflowManaged BulkOutcome = "workflow_managed"
	BulkNotQuiesced     BulkOutcome = "not_quiesced"
)

// BulkOutcomes are the outcomes in summary order: the successes
// (requeued, existing), then the refusals.
var BulkOutcomes = []BulkOutcome{BulkRequeued, BulkExisting, BulkMismatch, BulkNotFound, BulkWorkflowManaged, BulkNotQuiesced}

// outcomeIndex is o's place in BulkOutcomes (-1 for none).
func outcomeIndex(o BulkOutcome) int {
	for i, x := range BulkOutcomes {
		if x == o {
			return i
		}
	}
	return -1
}

// BulkSummary counts outcomes: Selected is the number of jobs processed,
// the others split it by outcome.
type BulkSummary struct {
	Selected, Requeued, Existing, Mismatch, NotFound, WorkflowManaged, NotQuiesced int
}

// Counts is the summary's counts in the order of BulkOutcomes.
func (s BulkSummary) Counts() []int {
	return []int{s.Requeued, s.Existing, s.Mismatch, s.NotFound, s.WorkflowManaged, s.NotQuiesced}
}

// Refused is the number of jobs that ended neither requeued nor existing.
func (s BulkSummary) Refused() int { return s.Selected - s.Requeued - s.Existing }

// summaryOf is the engine's totals as a BulkSummary.
func summaryOf(t bulk.Totals) BulkSummary {
	c := t.Counts
	return BulkSummary{Selected: t.Selected, Requeued: c[0], Existing: c[1], Mismatch: c[2], NotFound: c[3],
		WorkflowManaged: c[4], NotQuiesced: c[5]}
}

// BulkChunk is what Bulk reports after each chunk ends, committed or (dry
// run) rolled back.
type BulkChunk struct {
	// Index counts chunks from 0.
	Index int
	// Attempts is how many times the chunk's transaction ran: 1, or more
	// when PostgreSQL aborted it to break a deadlock and it ran again.
	Attempts int
	// Results are this chunk's, in source order.
	Results []BulkResult
	// Counts splits this chunk's results by outcome (BulkOutcomes order);
	// Total is the running totals, this chunk included.
	Counts []int
	Total  BulkSummary
	// Elapsed is the time since Bulk was called.
	Elapsed time.Duration
	// Expected is the number of jobs the action selects in all when
	// known: len(Sources), or a filter's count with Count; 0 otherwise.
	Expected int
	// FinishedUntil is a filter's upper bound as every page used it; nil
	// for a list. Rerunning an open-ended action with it resumes exactly
	// it.
	FinishedUntil *time.Time
}

// Validate checks a bulk request without touching the database, returning
// the first failure as a Validation error: scope, state policy, reason
// and operator as Request.Validate does (same codes); then exactly one selection
// (job.requeue_bulk_selection_invalid); a Sources list neither empty
// (job.requeue_bulk_sources_empty) nor naming a job twice
// (job.requeue_bulk_duplicate_source), each with a requeueable expected
// status (job.requeue_status_invalid); a filter's status
// (job.requeue_status_invalid), job type when set (job.job_type_blank,
// job.job_type_invalid, job.job_type_too_long), error code when set
// (job.requeue_bulk_error_code_invalid), since before until
// (job.requeue_bulk_range_invalid), limit not negative
// (job.requeue_bulk_limit_invalid); then chunk size and rate not negative
// (job.requeue_bulk_chunk_invalid, job.requeue_bulk_rate_invalid). A
// Stream is not read: its jobs are checked as the action reads them.
func (r BulkRequest) Validate() error {
	if err := validate.Scope(r.Scope); err != nil {
		return err
	}
	if err := r.StatePolicy.validate(); err != nil {
		return err
	}
	if err := validateReason(r.Reason); err != nil {
		return err
	}
	if _, err := validate.Operator(r.Operator); err != nil {
		return err
	}
	n := 0
	for _, set := range []bool{r.Sources != nil, r.Stream != nil, r.Filter != nil} {
		if set {
			n++
		}
	}
	switch {
	case n == 0:
		return errBulkSelection.New("bulk requeue request has neither jobs nor a filter")
	case n > 1:
		return errBulkSelection.New("bulk requeue request has more than one of a job list, a job stream and a filter")
	case r.Sources != nil && len(r.Sources) == 0:
		return errBulkSourcesEmpty.New("bulk requeue job list is empty")
	}
	if r.Sources != nil {
		seen := make(map[uuid.UUID]int, len(r.Sources))
		for i, s := range r.Sources {
			if j, ok := seen[s.JobID]; ok {
				return errBulkDuplicate.Newf("bulk requeue jobs %d and %d are both job %s", j+1, i+1, s.JobID)
			}
			seen[s.JobID] = i
			if err := s.ExpectedStatus.validate(); err != nil {
				return err
			}
		}
	}
	if f := r.Filter; f != nil {
		if err := f.Status.validate(); err != nil {
			return err
		}
		if f.JobType != "" {
			switch validate.Text(f.JobType, maxJobTypeBytes) {
			case validate.Blank:
				return errBulkJobTypeBlank.Newf("bulk requeue filter job type %q is blank", f.JobType)
			case validate.Unclean:
				return errBulkJobType.New("bulk requeue filter job type holds a NUL byte or invalid UTF-8")
			case validate.TooLong:
				return errBulkJobTypeTooLong.Newf("job type must be at most %d bytes, got %d", maxJobTypeBytes, len(f.JobType))
			}
		}
		if f.ErrorCode != "" && validate.Text(f.ErrorCode, maxErrorCodeBytes) != validate.OK {
			return errBulkErrorCode.Newf("bulk requeue filter error code %q is blank, unclean or too long", f.ErrorCode)
		}
		if f.FinishedSince != nil && f.FinishedUntil != nil && !f.FinishedSince.Before(*f.FinishedUntil) {
			return errBulkRange.Newf("bulk requeue finished-since %s is not before finished-until %s",
				f.FinishedSince.UTC().Format(time.RFC3339Nano), f.FinishedUntil.UTC().Format(time.RFC3339Nano))
		}
		if f.Limit < 0 {
			return errBulkLimit.Newf("bulk requeue limit is %d", f.Limit)
		}
	}
	if r.ChunkSize < 0 {
		return errBulkChunk.Newf("bulk requeue chunk size is %d", r.ChunkSize)
	}
	if r.Rate < 0 {
		return errBulkRate.Newf("bulk requeue rate is %d", r.Rate)
	}
	return nil
}

// Bulk runs a bulk action chunk by chunk and returns the totals, also on
// error (counting the chunks reported before it).
//
// It validates the request before taking a connection. Each chunk is one
// READ COMMITTED transaction of its own on one pooled connection, sent in
// two round trips (three for a filter, whose first selects the page): the
// locking update of every job requeueable as observed, in id order (FOR
// NO KEY UPDATE), with their REQUEUED events; then the classification
// read, without a lock, of the jobs it did not requeue, the workers'
// wake-up and COMMIT (not in a dry run). No lock is held from one chunk to the next, and memory is bounded
// by the chunk size whatever the number of jobs. A job that the unlocked
// read finds requeueable although the locking update passed it by (it
// changed in between) is requeued on its own afterwards by the single
// requeue's bounded lock loop (an error there stops the action after its
// chunk committed and before that chunk is reported).
//
// Deadlocks, the throttle (Rate: a token bucket of one chunk's worth
// refilled from the last requeue; jobs found existing or refused take
// nothing), the soft stop (Stop), ctx's cancel and dry runs behave as in
// bulk replay (replay.Bulk): the same engine runs both.
//
// onChunk (may be nil) is called after each chunk ends; an error from it
// stops the action and is returned. Any other error stops the action: the
// chunks before it stay committed, and running the same request again
// resumes.
func Bulk(ctx context.Context, pool *pgxpool.Pool, req BulkRequest, onChunk func(BulkChunk) error) (BulkSummary, error) {
	if err := req.Validate(); err != nil {
		return BulkSummary{}, err
	}
	a := &bulkAction{pool: pool, req: req}
	sp := bulk.Spec[Source, BulkResult]{
		Pool: pool, Op: bulkOperation, Label: req.Reason,
		ChunkSize: req.ChunkSize, Rate: req.Rate, DryRun: req.DryRun, Stop: req.Stop,
		Chunk: a.chunk, One: a.single,
		Outcomes: len(BulkOutcomes),
		Outcome:  func(r BulkResult) int { return outcomeIndex(r.Result) },
		Wrote:    func(r BulkResult) bool { return r.Result == BulkRequeued },
	}
	if sp.ChunkSize == 0 {
		sp.ChunkSize = DefaultBulkChunk
	}
	switch {
	case req.Filter != nil:
		sp.Filter = &bulk.Filter[Source]{Page: a.page, Until: req.Filter.FinishedUntil, Limit: req.Filter.Limit, Count: req.Count}
	case req.Sources != nil:
		sp.List, sp.Expected = bulk.Slice(req.Sources), len(req.Sources)
	default:
		sp.List = req.Stream
	}
	t, err := bulk.Run(ctx, sp, func(c bulk.Chunk[BulkResult]) error {
		if onChunk == nil {
			return nil
		}
		return onChunk(BulkChunk{Index: c.Index, Attempts: c.Attempts, Results: c.Results, Counts: c.Counts,
			Total: summaryOf(c.Totals), Elapsed: c.Elapsed, Expected: c.Expected, FinishedUntil: c.Until})
	})
	return summaryOf(t), err
}

// BulkCount returns how many jobs the request selects now, for a progress
// total: len(Sources) for a list, and for a filter the number of jobs it
// matches (at most Limit), counted on q without a lock, with an open
// FinishedUntil read as the database's time now. It validates the request
// first; a Stream cannot be counted (job.requeue_bulk_selection_invalid).
func BulkCount(ctx context.Context, q db.DBTX, req BulkRequest) (int, error) {
	q = txn.Wrap(q)
	if err := req.Validate(); err != nil {
		return 0, err
	}
	if req.Stream != nil {
		return 0, errBulkSelection.New("bulk requeue job stream cannot be counted before it is read")
	}
	if req.Filter == nil {
		return len(req.Sources), nil
	}
	n, err := countSelection(ctx, q, req, req.Filter.FinishedUntil)
	if err != nil {
		return 0, dberr.Translate(ctx, "count bulk job requeue sources", err)
	}
	return n, nil
}

// countSelection counts the request's filter selection from the start,
// at most its Limit, below until (nil: now()) on q.
func countSelection(ctx context.Context, q db.DBTX, req BulkRequest, until *time.Time) (int, error) {
	f := req.Filter
	max := int32(math.MaxInt32)
	if f.Limit > 0 && f.Limit < math.MaxInt32 {
		max = int32(f.Limit)
	}
	n, err := queries.JobCountFinishedForRequeue(ctx, q, db.JobCountFinishedForRequeueParams{
		OrganizationID: rows.Tenant(req.Scope), Status: db.JobStatus(f.Status), JobType: optional(f.JobType),
		ErrorCode: optional(f.ErrorCode), Since: f.FinishedSince, Until: until, MaxJobs: max,
	})
	return int(n), err
}

// optional is nil for "", else a pointer to s.
func optional(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
