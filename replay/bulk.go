package replay

import (
	"context"
	"iter"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/db"
	"github.com/runledger-go/runledger/internal/bulk"
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
// runledger.MaxJobTypeBytes.
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
		"Job type is too long (at most 255 bytes).")
)

// BulkRequest is one bulk action: one key and one reason for every source
// it selects, by an explicit list (Sources, or Stream for a list too long
// to hold in memory) or by a filter: exactly one of Sources, Stream and
// Filter.
type BulkRequest struct {
	// Scope is the caller's tenant, for both selections: a source outside
	// it is not_found (list) or never selected (filter).
	Scope runledger.Scope
	// Key and Reason are validated like Request's, and every source is
	// replayed under them: running the same action again (same key and
	// reason) replays only what is missing and reports the rest existing.
	Key    string
	Reason string
	// Operator, when not "", names who asked for the action; every
	// replay's ENQUEUED event records it as "operator" (as Request's).
	Operator string
	// Sources is an explicit list, replayed in this order; a job id twice
	// is a validation error.
	Sources []Source
	// Stream is an explicit list read as the action goes, a chunk at a
	// time, so that memory stays bounded by the chunk size whatever its
	// length. Bulk cannot check it before it starts: a job listed twice in
	// one chunk stops the action with job.replay_bulk_duplicate_source
	// when that chunk is formed (the chunks before stay committed), and
	// twice in different chunks it is simply done twice (the second time
	// existing, or a mismatch); an error it yields stops the action before
	// the chunk being formed. Check the list first (the command line does)
	// when bad input must write nothing.
	Stream iter.Seq2[Source, error]
	// Filter selects the sources instead.
	Filter *Filter
	// ChunkSize is the number of sources per transaction; 0 means
	// DefaultBulkChunk. With a Rate below it, chunks hold Rate sources.
	ChunkSize int
	// Rate is at most how many replays are inserted per second; 0 means
	// unlimited. See Bulk for the throttle.
	Rate int
	// DryRun runs each chunk's statements and rolls the chunk back:
	// results and totals are what a real run would report at that moment,
	// and nothing is written.
	DryRun bool
	// Count, for a filter, counts the whole selection in the first chunk's
	// transaction, under the same bounds (BulkChunk.Expected): a scan of
	// every selected job with its lineage probe (BulkCount's cost), paid
	// before the first chunk's replays. Ignored for a list.
	Count bool
	// Stop, once closed, stops the action softly: the chunk in flight
	// commits (or, in a dry run, rolls back) and is reported, no other
	// chunk begins, and Bulk returns an error matching ErrBulkStopped.
	// nil never stops. To stop at once instead, cancel ctx.
	Stop <-chan struct{}
}

// ErrBulkStopped is what Bulk's error matches (errors.Is) when
// BulkRequest.Stop ended the action before its selection was done.
var ErrBulkStopped = bulk.ErrStopped

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
	// both set, since must be before until. When nil, the action pins it
	// to the database's time (now()) at its first page and uses that for
	// every page, reporting it as BulkChunk.SucceededUntil: jobs that
	// finish while the action runs (its own replays, or another action's,
	// among them) are not selected. A job whose completing transaction
	// began before the first page and committed after it carries a finish
	// time before the bound, and is selected by a later page.
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

// bulkOutcomes are the outcomes in the order of the engine's counts.
var bulkOutcomes = [...]BulkOutcome{BulkInserted, BulkExisting, BulkConflict, BulkMismatch, BulkNotFound,
	BulkWorkflowManaged, BulkDefinitionUnavailable}

// outcomeIndex is o's place in bulkOutcomes (-1 for none).
func outcomeIndex(o BulkOutcome) int {
	for i, x := range bulkOutcomes {
		if x == o {
			return i
		}
	}
	return -1
}

// summaryOf is the engine's totals as a BulkSummary.
func summaryOf(t bulk.Totals) BulkSummary {
	c := func(o BulkOutcome) int { return t.Counts[outcomeIndex(o)] }
	return BulkSummary{Selected: t.Selected, Inserted: c(BulkInserted), Existing: c(BulkExisting),
		Conflict: c(BulkConflict), Mismatch: c(BulkMismatch), NotFound: c(BulkNotFound),
		WorkflowManaged: c(BulkWorkflowManaged), DefinitionUnavailable: c(BulkDefinitionUnavailable)}
}

// Refused is the number of sources that ended neither inserted nor
// existing.
func (s BulkSummary) Refused() int { return s.Selected - s.Inserted - s.Existing }

// BulkChunk is what Bulk reports after each chunk ends, committed or (dry
// run) rolled back.
type BulkChunk struct {
	// Index counts chunks from 0.
	Index int
	// Attempts is how many times the chunk's transaction ran: 1, or more
	// when PostgreSQL aborted it to break a deadlock and it ran again.
	Attempts int
	// Results are this chunk's, in source order (list order, or the
	// filter's finish order).
	Results []BulkResult
	// Total is the running totals, this chunk included.
	Total BulkSummary
	// Elapsed is the time since Bulk was called.
	Elapsed time.Duration
	// Expected is the number of sources the action selects in all, when
	// known: len(Sources) for a Sources list, the count made in the first
	// chunk's transaction for a filter with Count; 0 otherwise (a Stream,
	// a filter without Count).
	Expected int
	// SucceededUntil is a filter's upper bound as every page used it: the
	// request's, or the database's time pinned at the first page. nil for
	// a list. Rerunning an open-ended action with this bound resumes
	// exactly it.
	SucceededUntil *time.Time
}

// Validate checks a bulk request without touching the database, returning
// the first failure as a Validation error: the key and reason as
// Request.Validate does (same codes), and the operator; then exactly one selection of
// Sources, Stream and Filter (job.replay_bulk_selection_invalid); a
// Sources list neither empty (job.replay_bulk_sources_empty) nor naming a
// job twice (job.replay_bulk_duplicate_source); a filter's job type
// non-blank, clean and at most 255 bytes (job.job_type_blank,
// job.job_type_invalid, job.job_type_too_long), since before until
// (job.replay_bulk_range_invalid), limit not negative
// (job.replay_bulk_limit_invalid); then chunk size and rate not negative
// (job.replay_bulk_chunk_invalid, job.replay_bulk_rate_invalid). A Stream
// is not read: its sources are checked as the action reads them.
func (r BulkRequest) Validate() error {
	if err := (Request{Scope: r.Scope, Key: r.Key, Reason: r.Reason, Operator: r.Operator}).Validate(); err != nil {
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
		return errBulkSelection.New("bulk replay request has neither sources nor a filter")
	case n > 1:
		return errBulkSelection.New("bulk replay request has more than one of a source list, a source stream and a filter")
	case r.Sources != nil && len(r.Sources) == 0:
		return errBulkSourcesEmpty.New("bulk replay source list is empty")
	}
	if r.Sources != nil {
		seen := make(map[uuid.UUID]int, len(r.Sources))
		for i, s := range r.Sources {
			if j, ok := seen[s.JobID]; ok {
				return errBulkDuplicate.Newf("bulk replay sources %d and %d are both job %s", j+1, i+1, s.JobID)
			}
			seen[s.JobID] = i
		}
	}
	if f := r.Filter; f != nil {
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

// Bulk runs a bulk action chunk by chunk and returns the totals, also on
// error (counting the chunks reported before it).
//
// It validates the request before taking a connection. Each chunk is one
// READ COMMITTED transaction of its own on one pooled connection; no lock
// is held from one chunk to the next, and memory is bounded by the chunk
// size whatever the number of sources (a Stream is read a chunk at a
// time). A chunk sends its statements in two round trips (three for a
// filter, whose first selects the page, and counts the selection in the
// first chunk with Count): the lineage lookup with the lock of the
// eligible sources without lineage, in id order (FOR NO KEY UPDATE); then
// the second lookup and the insert of every missing replay (job, ENQUEUED
// event, lineage, the job type's definition read FOR SHARE) for the locked
// sources, the classification read of the others, and COMMIT. A source
// that an unlocked read finds eligible although the locking read passed
// it by (it changed in between) is replayed on its own afterwards by the
// single replay's bounded lock loop, as SucceededJob would (an error
// there, such as job.replay_source_unstable, stops the action after its
// chunk committed and before that chunk is reported).
//
// Deadlocks: the lock order (sources by id, then definitions) means
// chunks, and single replays (which lock one source), wait for each other
// instead of deadlocking. It does not rule out a deadlock with a caller's
// own transaction that holds locks the chunk wants and then waits for one
// the chunk holds: one that replays two sources (SucceededJobTx) in
// descending id order, or that updates a job definition and then replays
// a job of that type. PostgreSQL aborts one of the two (40P01); when it
// is the chunk, the chunk rolls back and runs again (BulkChunk.Attempts),
// at most three times in all; when it is the caller's transaction, the
// caller gets db.transient.
//
// onChunk (may be nil) is called after each chunk ends, committed or, in a
// dry run, rolled back; an error from it stops the action and is
// returned. Any other error stops the action: the chunks before it stay
// committed, the failed one wrote nothing (or, for a failed COMMIT,
// runledger.ErrCommitUnconfirmed, may have), and running the same request
// again resumes. Closing req.Stop stops it softly: the chunk in flight
// commits and is reported, no other begins, and the error matches
// ErrBulkStopped. A canceled ctx stops it at once: a statement in flight
// (one waiting on a lock, say) is canceled, the open chunk rolls back,
// and the error wraps ctx.Err().
//
// With Rate set, inserts are throttled by a token bucket of one chunk's
// worth (ChunkSize, lowered to Rate when Rate is smaller) refilled at
// Rate per second from the last insert: a chunk begins once the bucket
// holds a token for each of its sources, a source replayed on its own
// once it holds one, and what was inserted takes its tokens when its
// transaction ends. So a rerun that walks sources already replayed (or
// refused ones) goes at full speed without building credit, and the
// inserts after it still come at most Rate per second, never more than
// one chunk at once. A dry run is not throttled.
func Bulk(ctx context.Context, pool *pgxpool.Pool, req BulkRequest, onChunk func(BulkChunk) error) (BulkSummary, error) {
	if err := req.Validate(); err != nil {
		return BulkSummary{}, err
	}
	a := &bulkAction{pool: pool, req: req}
	sp := bulk.Spec[Source, BulkResult]{
		Pool: pool, Op: bulkOperation, Label: req.Key,
		ChunkSize: req.ChunkSize, Rate: req.Rate, DryRun: req.DryRun, Stop: req.Stop,
		Chunk: a.chunk, One: a.single,
		Outcomes: len(bulkOutcomes),
		Outcome:  func(r BulkResult) int { return outcomeIndex(r.Result) },
		Wrote:    func(r BulkResult) bool { return r.Result == BulkInserted },
	}
	if sp.ChunkSize == 0 {
		sp.ChunkSize = DefaultBulkChunk
	}
	switch {
	case req.Filter != nil:
		sp.Filter = &bulk.Filter[Source]{Page: a.page, Until: req.Filter.SucceededUntil, Limit: req.Filter.Limit, Count: req.Count}
	case req.Sources != nil:
		sp.List, sp.Expected = bulk.Slice(req.Sources), len(req.Sources)
	default:
		sp.List = req.Stream
	}
	t, err := bulk.Run(ctx, sp, func(c bulk.Chunk[BulkResult]) error {
		if onChunk == nil {
			return nil
		}
		return onChunk(BulkChunk{Index: c.Index, Attempts: c.Attempts, Results: c.Results, Total: summaryOf(c.Totals),
			Elapsed: c.Elapsed, Expected: c.Expected, SucceededUntil: c.Until})
	})
	return summaryOf(t), err
}

// BulkCount returns how many sources the request selects now, for a
// progress total: len(Sources) for a list, and for a filter the number of
// jobs it matches (at most Limit), counted on q (a pool, connection or
// transaction) without a lock, with an open SucceededUntil read as the
// database's time now. It validates the request first; a Stream cannot
// be counted (job.replay_bulk_selection_invalid).
//
// For a filter it is one statement that reads every selected job and
// probes its lineage: its cost grows with the selection (see
// docs/PERFORMANCE.md), and it runs before the action, not in it. To
// count inside the action, under the bound the action pins, set
// BulkRequest.Count instead.
func BulkCount(ctx context.Context, q db.DBTX, req BulkRequest) (int, error) {
	q = txn.Wrap(q)
	if err := req.Validate(); err != nil {
		return 0, err
	}
	if req.Stream != nil {
		return 0, errBulkSelection.New("bulk replay source stream cannot be counted before it is read")
	}
	if req.Filter == nil {
		return len(req.Sources), nil
	}
	n, err := countSelection(ctx, q, req, req.Filter.SucceededUntil)
	if err != nil {
		return 0, dberr.Translate(ctx, "count bulk job replay sources", err)
	}
	return n, nil
}
