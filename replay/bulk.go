package replay

import (
	"context"
	"math"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/db"
	"github.com/runledger-go/runledger/internal/dberr"
	"github.com/runledger-go/runledger/internal/errs"
	"github.com/runledger-go/runledger/internal/txn"
	"github.com/runledger-go/runledger/internal/validate"
)

// Bulk compare-and-replay: one request key and one reason for a whole
// selection of sources, each source getting the single replay's semantics,
// chunk by chunk.

// DefaultBulkChunk is the number of sources per transaction when
// BulkRequest.ChunkSize is 0.
const DefaultBulkChunk = 1000

// maxJobTypeBytes is the longest job type a filter accepts, as
// jobs.MaxJobTypeBytes.
const maxJobTypeBytes = 255

// The bulk-request validation errors, all category Validation. A bulk
// request's key and reason fail with the single replay's codes.
var (
	errBulkSelection = errs.Validation("job.replay_bulk_selection_invalid",
		"Bulk replay needs exactly one selection: a list of sources or a filter.")
	errBulkSourcesEmpty = errs.Validation("job.replay_bulk_sources_empty",
		"Bulk replay source list is empty.")
	errBulkDuplicate = errs.Validation("job.replay_bulk_duplicate_source",
		"Bulk replay source list names a job twice.")
	errBulkRange = errs.Validation("job.replay_bulk_range_invalid",
		"Bulk replay succeeded-since time must be before the succeeded-until time.")
	errBulkLimit = errs.Validation("job.replay_bulk_limit_invalid",
		"Bulk replay limit must be positive.")
	errBulkChunk = errs.Validation("job.replay_bulk_chunk_invalid",
		"Bulk replay chunk size must be positive.")
	errBulkRate = errs.Validation("job.replay_bulk_rate_invalid",
		"Bulk replay rate must be positive.")
	errBulkJobTypeBlank = errs.Validation("job.job_type_blank",
		"Job type must not be blank.")
	errBulkJobTypeInvalid = errs.Validation("job.job_type_invalid",
		"Job type must be valid UTF-8 without NUL bytes.")
	errBulkJobTypeTooLong = errs.Validation("job.job_type_too_long",
		"Job type is too long.")
)

// BulkRequest is one bulk action: one key and one reason for every source
// it selects, by an explicit list or by a filter (exactly one of Sources
// and Filter).
type BulkRequest struct {
	// Scope is the caller's tenant, for both selections: a source outside
	// it is not_found (list) or never selected (filter).
	Scope runledger.Scope
	// Key and Reason are validated like Request's, and every source is
	// replayed under them: running the same action again (same key and
	// reason) replays only what is missing and reports the rest existing.
	Key    string
	Reason string
	// Sources is an explicit list, replayed in this order; a job id twice
	// is a validation error.
	Sources []Source
	// Filter selects the sources instead.
	Filter *Filter
	// ChunkSize is the number of sources per transaction; 0 means
	// DefaultBulkChunk. With a Rate below it, chunks hold Rate sources.
	ChunkSize int
	// Rate is at most how many replays are inserted per second; 0 means
	// unlimited.
	Rate int
	// DryRun runs each chunk's statements and rolls the chunk back:
	// results and totals are what a real run would report at that moment,
	// and nothing is written.
	DryRun bool
}

// Source is one source of a list: a job and the run the caller observed
// as SUCCEEDED (as Request.SourceJobID and Request.ExpectedRunNumber).
type Source struct {
	JobID             uuid.UUID
	ExpectedRunNumber int32
}

// Filter selects the jobs of one type in the request's scope that are
// SUCCEEDED and finished within [SucceededSince, SucceededUntil), in
// finish order (then id). The expected run of each is the run it has when
// the chunk locks it. Jobs that are replays made under the request's key
// are never selected (the action does not replay its own replays), nor
// SUCCEEDED jobs without a finish time.
type Filter struct {
	// JobType is required.
	JobType string
	// SucceededSince, when set, keeps jobs with finished_at >= it.
	SucceededSince *time.Time
	// SucceededUntil, when set, keeps jobs with finished_at < it; with
	// both set, since must be before until.
	SucceededUntil *time.Time
	// Limit caps the number of sources selected; 0 means no cap.
	Limit int
}

// BulkResult is one source's outcome.
type BulkResult struct {
	SourceJobID uuid.UUID
	// SourceRunNumber is the expected run (list) or the run the source had
	// when locked (filter).
	SourceRunNumber int32
	Result          BulkOutcome
	// ReplayJobID is set when Result is BulkInserted or BulkExisting.
	ReplayJobID *uuid.UUID
}

// BulkOutcome is what happened to one source. Each is the verdict the
// single replay would have given the source at that moment: Inserted or
// Existing for Replayed, Mismatch for ExpectationMismatch, NotFound for
// NotFound, and Conflict, WorkflowManaged and DefinitionUnavailable for
// the errors job.replay_idempotency_conflict, job.workflow_managed and
// job.definition_not_found_or_disabled, which here refuse one source and
// the action goes on.
type BulkOutcome string

// The outcomes; the strings are the JSON spellings of the command line.
const (
	BulkInserted              BulkOutcome = "inserted"
	BulkExisting              BulkOutcome = "existing"
	BulkConflict              BulkOutcome = "conflict"
	BulkMismatch              BulkOutcome = "mismatch"
	BulkNotFound              BulkOutcome = "not_found"
	BulkWorkflowManaged       BulkOutcome = "workflow_managed"
	BulkDefinitionUnavailable BulkOutcome = "definition_unavailable"
)

// BulkSummary counts outcomes: Selected is the number of sources
// processed, the others split it by outcome.
type BulkSummary struct {
	Selected, Inserted, Existing, Conflict, Mismatch, NotFound, WorkflowManaged, DefinitionUnavailable int
}

func (s *BulkSummary) add(r BulkOutcome) {
	s.Selected++
	switch r {
	case BulkInserted:
		s.Inserted++
	case BulkExisting:
		s.Existing++
	case BulkConflict:
		s.Conflict++
	case BulkMismatch:
		s.Mismatch++
	case BulkNotFound:
		s.NotFound++
	case BulkWorkflowManaged:
		s.WorkflowManaged++
	case BulkDefinitionUnavailable:
		s.DefinitionUnavailable++
	}
}

// Refused is the number of sources that ended neither inserted nor
// existing.
func (s BulkSummary) Refused() int { return s.Selected - s.Inserted - s.Existing }

// BulkChunk is what Bulk reports after each chunk ends, committed or (dry
// run) rolled back.
type BulkChunk struct {
	// Index counts chunks from 0.
	Index int
	// Results are this chunk's, in source order (list order, or the
	// filter's finish order).
	Results []BulkResult
	// Total is the running totals, this chunk included.
	Total BulkSummary
	// Elapsed is the time since Bulk was called.
	Elapsed time.Duration
}

// Validate checks a bulk request without touching the database, returning
// the first failure as a Validation error: the key and reason as
// Request.Validate does (same codes); then exactly one selection
// (job.replay_bulk_selection_invalid); a list neither empty
// (job.replay_bulk_sources_empty) nor naming a job twice
// (job.replay_bulk_duplicate_source); a filter's job type non-blank, clean
// and at most 255 bytes (job.job_type_blank, job.job_type_invalid,
// job.job_type_too_long), since before until (job.replay_bulk_range_invalid),
// limit not negative (job.replay_bulk_limit_invalid); then chunk size and
// rate not negative (job.replay_bulk_chunk_invalid,
// job.replay_bulk_rate_invalid).
func (r BulkRequest) Validate() error {
	if err := (Request{Key: r.Key, Reason: r.Reason}).Validate(); err != nil {
		return err
	}
	switch {
	case r.Filter == nil && r.Sources == nil:
		return errBulkSelection.New("bulk replay request has neither sources nor a filter")
	case r.Filter != nil && r.Sources != nil:
		return errBulkSelection.New("bulk replay request has both sources and a filter")
	case r.Filter == nil && len(r.Sources) == 0:
		return errBulkSourcesEmpty.New("bulk replay source list is empty")
	}
	if r.Filter == nil {
		seen := make(map[uuid.UUID]int, len(r.Sources))
		for i, s := range r.Sources {
			if j, ok := seen[s.JobID]; ok {
				return errBulkDuplicate.Newf("bulk replay sources %d and %d are both job %s", j+1, i+1, s.JobID)
			}
			seen[s.JobID] = i
		}
	} else {
		f := r.Filter
		switch validate.Text(f.JobType, maxJobTypeBytes) {
		case validate.Blank:
			return errBulkJobTypeBlank.Newf("bulk replay filter job type %q is blank", f.JobType)
		case validate.Unclean:
			return errBulkJobTypeInvalid.New("bulk replay filter job type holds a NUL byte or invalid UTF-8")
		case validate.TooLong:
			return errBulkJobTypeTooLong.Newf("job type must be at most %d bytes, got %d", maxJobTypeBytes, len(f.JobType))
		}
		if f.SucceededSince != nil && f.SucceededUntil != nil && !f.SucceededSince.Before(*f.SucceededUntil) {
			return errBulkRange.Newf("bulk replay succeeded-since %s is not before succeeded-until %s",
				f.SucceededSince.UTC().Format(time.RFC3339Nano), f.SucceededUntil.UTC().Format(time.RFC3339Nano))
		}
		if f.Limit < 0 {
			return errBulkLimit.Newf("bulk replay limit is %d", f.Limit)
		}
	}
	if r.ChunkSize < 0 {
		return errBulkChunk.Newf("bulk replay chunk size is %d", r.ChunkSize)
	}
	if r.Rate < 0 {
		return errBulkRate.Newf("bulk replay rate is %d", r.Rate)
	}
	return nil
}

// chunkSize is the number of sources per chunk: ChunkSize or the default,
// at most Rate.
func (r BulkRequest) chunkSize() int {
	n := r.ChunkSize
	if n == 0 {
		n = DefaultBulkChunk
	}
	if r.Rate > 0 && r.Rate < n {
		n = r.Rate
	}
	return n
}

// Bulk runs a bulk action chunk by chunk and returns the totals.
//
// It validates the request before taking a connection. Each chunk is one
// READ COMMITTED transaction of its own on one pooled connection; no lock
// is held from one chunk to the next, and memory is bounded by the chunk
// size whatever the number of sources. A chunk sends its statements in
// two round trips (three for a filter, whose first selects the chunk):
// the lineage lookup with the lock of the eligible sources without
// lineage, in id order (FOR NO KEY UPDATE); then the second lookup and
// the insert of every missing replay (job, ENQUEUED event, lineage) for
// the locked sources, the classification read of the others, and COMMIT.
// A source that an unlocked read finds eligible although the locking read
// passed it by (it changed in between) is replayed on its own afterwards
// by the single replay's bounded lock loop, as SucceededJob would (an
// error there, such as job.replay_source_unstable, stops the action after
// its chunk committed and before that chunk is reported).
//
// onChunk (may be nil) is called after each chunk ends, committed or, in a
// dry run, rolled back; an error from it stops the action and is
// returned. A chunk that fails with a deadlock (which the lock order
// rules out between bulk and single replays, but not against every other
// writer) rolls back and runs again, at most three times. Any other error
// stops the action: the chunks before it stay committed, the failed one
// wrote nothing (or, for a failed COMMIT, runledger.ErrCommitUnconfirmed,
// may have), and running the same request again resumes. A canceled ctx
// stops the action once the current chunk has committed or rolled back
// (a statement waiting on a lock is canceled); the error then wraps
// ctx.Err(). With Rate set, Bulk waits between chunks so that replays are
// inserted at most Rate per second.
func Bulk(ctx context.Context, pool *pgxpool.Pool, req BulkRequest, onChunk func(BulkChunk) error) (BulkSummary, error) {
	var total BulkSummary
	if err := req.Validate(); err != nil {
		return total, err
	}
	b := &bulk{pool: pool, req: req, start: time.Now(), onChunk: onChunk}
	if req.Filter != nil {
		return b.byFilter(ctx)
	}
	return b.byList(ctx)
}

// BulkCount returns how many sources the request selects now, for a
// progress total: len(Sources) for a list, and for a filter the number of
// jobs it matches (at most Limit), counted on q (a pool, connection or
// transaction) without a lock. It validates the request first.
func BulkCount(ctx context.Context, q db.DBTX, req BulkRequest) (int, error) {
	q = txn.Wrap(q)
	if err := req.Validate(); err != nil {
		return 0, err
	}
	if req.Filter == nil {
		return len(req.Sources), nil
	}
	f := req.Filter
	max := int32(math.MaxInt32)
	if f.Limit > 0 && f.Limit < math.MaxInt32 {
		max = int32(f.Limit)
	}
	var n int64
	var err error
	if org := req.Scope.OrganizationIDPtr(); org != nil {
		n, err = queries.JobCountSucceededForReplayOrg(ctx, q, db.JobCountSucceededForReplayOrgParams{
			JobType: f.JobType, OrganizationID: org, Since: f.SucceededSince, Until: f.SucceededUntil,
			ReplayRequestKey: req.Key, MaxJobs: max,
		})
	} else {
		n, err = queries.JobCountSucceededForReplayGlobal(ctx, q, db.JobCountSucceededForReplayGlobalParams{
			JobType: f.JobType, Since: f.SucceededSince, Until: f.SucceededUntil,
			ReplayRequestKey: req.Key, MaxJobs: max,
		})
	}
	if err != nil {
		return 0, dberr.Translate(ctx, "count bulk job replay sources", err)
	}
	return int(n), nil
}
