package bulk

import (
	"context"
	"iter"
	"math"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/db"
	"github.com/runledger-go/runledger/internal/dberr"
	"github.com/runledger-go/runledger/internal/errs"
	"github.com/runledger-go/runledger/internal/txn"
	"github.com/runledger-go/runledger/internal/validate"
)

// DefaultChunk is the number of sources per chunk when a request's chunk
// size is 0.
const DefaultChunk = 1000

// Adapter is an operation's bulk form: everything a public bulk request
// of the operation (replay's, requeue's) shares with the others except its
// statements. One package-level Adapter per operation validates the
// request's selection and pacing, runs it on the engine and counts its
// outcomes; the operation keeps its types, its chunk statements and its
// filter's queries. S is the operation's source, R its per-source result
// and O its outcome.
type Adapter[S, R any, O comparable] struct {
	// Noun names the action in error details ("bulk replay"); Item names
	// one of its sources ("source", "job").
	Noun, Item string
	// Op names each chunk's transaction (Spec.Op) and the transaction of a
	// source done alone in a dry run.
	Op string
	// The operation's validation errors for what the Validate methods
	// check: the selection (none or more than one), an empty list, a job
	// listed twice, a filter's window (since not before until) and limit
	// (negative), a negative chunk size, a negative rate.
	Selection, SourcesEmpty, Duplicate, Range, Limit, Chunk, Rate errs.Kind
	// Bound names a filter's time bounds in error details ("succeeded":
	// succeeded-since, succeeded-until).
	Bound string
	// ID is a source's job id, the key of the duplicate check.
	ID func(S) uuid.UUID
	// Check, when set, validates one listed source (a Sources list's
	// before the action, a Stream's as its chunk is formed).
	Check func(S) error
	// Outcomes are the operation's outcomes in the order of the engine's
	// counts; Outcome is a result's, and Wrote the one outcome that writes
	// what the rate limits.
	Outcomes []O
	Outcome  func(R) O
	Wrote    O
}

// Selection is a bulk request's choice of sources: exactly one of an
// explicit list held in memory, a list read as the action goes, and a
// filter (whose own fields the operation validates).
type Selection[S any] struct {
	Sources []S
	Stream  iter.Seq2[S, error]
	Filter  bool
}

// ValidateSelection checks that exactly one selection is set
// (a.Selection), that a Sources list is not empty (a.SourcesEmpty), names
// no job twice (a.Duplicate) and holds only sources a.Check accepts. A
// Stream is not read.
func (a *Adapter[S, R, O]) ValidateSelection(sel Selection[S]) error {
	n := 0
	for _, set := range []bool{sel.Sources != nil, sel.Stream != nil, sel.Filter} {
		if set {
			n++
		}
	}
	switch {
	case n == 0:
		return a.Selection.Newf("%s request has neither %ss nor a filter", a.Noun, a.Item)
	case n > 1:
		return a.Selection.Newf("%s request has more than one of a %s list, a %s stream and a filter", a.Noun, a.Item, a.Item)
	case sel.Sources != nil && len(sel.Sources) == 0:
		return a.SourcesEmpty.Newf("%s %s list is empty", a.Noun, a.Item)
	}
	seen := make(map[uuid.UUID]int, len(sel.Sources))
	for i, s := range sel.Sources {
		id := a.ID(s)
		if j, ok := seen[id]; ok {
			return a.Duplicate.Newf("%s %ss %d and %d are both job %s", a.Noun, a.Item, j+1, i+1, id)
		}
		seen[id] = i
		if a.Check != nil {
			if err := a.Check(s); err != nil {
				return err
			}
		}
	}
	return nil
}

// The filter job type errors, the codes every job type is checked with.
var (
	errJobTypeBlank = errs.Validation("job.job_type_blank",
		"Job type must not be blank.")
	errJobTypeInvalid = errs.Validation("job.job_type_invalid",
		"Job type must be valid UTF-8 without NUL bytes.")
	errJobTypeTooLong = errs.Validation("job.job_type_too_long",
		"Job type is too long (at most 255 bytes).")
)

// ValidateJobType checks a filter's job type: non-blank
// (job.job_type_blank), valid UTF-8 without NUL (job.job_type_invalid), at
// most runledger.MaxJobTypeBytes (job.job_type_too_long).
func (a *Adapter[S, R, O]) ValidateJobType(jobType string) error {
	switch validate.Text(jobType, runledger.MaxJobTypeBytes) {
	case validate.Blank:
		return errJobTypeBlank.Newf("%s filter job type %q is blank", a.Noun, jobType)
	case validate.Unclean:
		return errJobTypeInvalid.Newf("%s filter job type holds a NUL byte or invalid UTF-8", a.Noun)
	case validate.TooLong:
		return errJobTypeTooLong.Newf("job type must be at most %d bytes, got %d", runledger.MaxJobTypeBytes, len(jobType))
	}
	return nil
}

// ValidateWindow checks a filter's time window and limit: since before
// until when both are set (a.Range), limit not negative (a.Limit).
func (a *Adapter[S, R, O]) ValidateWindow(since, until *time.Time, limit int) error {
	if since != nil && until != nil && !since.Before(*until) {
		return a.Range.Newf("%s %s-since %s is not before %s-until %s", a.Noun, a.Bound,
			since.UTC().Format(time.RFC3339Nano), a.Bound, until.UTC().Format(time.RFC3339Nano))
	}
	if limit < 0 {
		return a.Limit.Newf("%s limit is %d", a.Noun, limit)
	}
	return nil
}

// ValidatePace checks that the chunk size (a.Chunk) and the rate (a.Rate)
// are not negative; 0 means the default for either.
func (a *Adapter[S, R, O]) ValidatePace(chunkSize, rate int) error {
	if chunkSize < 0 {
		return a.Chunk.Newf("%s chunk size is %d", a.Noun, chunkSize)
	}
	if rate < 0 {
		return a.Rate.Newf("%s rate is %d", a.Noun, rate)
	}
	return nil
}

// checkChunk checks a Stream's chunk once formed: no job twice in it, each
// source accepted by a.Check.
func (a *Adapter[S, R, O]) checkChunk(sources []S, index int) error {
	seen := make(map[uuid.UUID]struct{}, len(sources))
	for _, s := range sources {
		id := a.ID(s)
		if _, dup := seen[id]; dup {
			return a.Duplicate.Newf("%s %s stream names job %s twice in chunk %d", a.Noun, a.Item, id, index+1)
		}
		seen[id] = struct{}{}
		if a.Check != nil {
			if err := a.Check(s); err != nil {
				return err
			}
		}
	}
	return nil
}

// Request is the operation-independent part of a validated bulk request,
// as Adapter.Run takes it.
type Request[S any] struct {
	Selection[S]
	// Label identifies the action at failpoints (Spec.Label).
	Label string
	// Page, Until, Limit and Count make the filter when Selection.Filter
	// is set (see Filter).
	Page  func(ctx context.Context, s *txn.Session, q PageQuery) (Page[S], error)
	Until *time.Time
	Limit int
	Count bool
	// ChunkSize (0 for DefaultChunk), Rate, DryRun and Stop are Spec's.
	ChunkSize, Rate int
	DryRun          bool
	Stop            <-chan struct{}
}

// Run runs a validated request on the engine (see the package Run) with
// the operation's chunk function and its function for a source done
// alone, and returns the totals, also on error. A Sources list reports
// its length as Chunk.Expected; each chunk of a Stream is checked as it
// is formed (checkChunk), and a failure stops the action before that
// chunk begins.
func (a *Adapter[S, R, O]) Run(ctx context.Context, pool *pgxpool.Pool, req Request[S],
	chunk func(context.Context, Call, []S) (Done[S, R], error), one func(context.Context, S) (R, error),
	onChunk func(Chunk[R]) error) (Totals, error) {
	sp := Spec[S, R]{
		Pool: pool, Op: a.Op, Label: req.Label,
		ChunkSize: req.ChunkSize, Rate: req.Rate, DryRun: req.DryRun, Stop: req.Stop,
		Chunk: chunk, One: one,
		Outcomes: len(a.Outcomes),
		Outcome:  func(r R) int { return a.Index(a.Outcome(r)) },
		Wrote:    func(r R) bool { return a.Outcome(r) == a.Wrote },
	}
	if sp.ChunkSize == 0 {
		sp.ChunkSize = DefaultChunk
	}
	switch {
	case req.Filter:
		sp.Filter = &Filter[S]{Page: req.Page, Until: req.Until, Limit: req.Limit, Count: req.Count}
	case req.Sources != nil:
		sp.List, sp.Expected = Slice(req.Sources), len(req.Sources)
	default:
		sp.List, sp.CheckList = req.Stream, a.checkChunk
	}
	return Run(ctx, sp, onChunk)
}

// Report adapts an operation's public per-chunk callback to the
// engine's: each chunk is converted to the operation's report type before
// onChunk sees it. A nil onChunk reports nothing.
func Report[R, C any](onChunk func(C) error, convert func(Chunk[R]) C) func(Chunk[R]) error {
	if onChunk == nil {
		return nil
	}
	return func(c Chunk[R]) error { return onChunk(convert(c)) }
}

// Index is o's place in a.Outcomes, the index of its count in Totals and
// Chunk (-1 for none).
func (a *Adapter[S, R, O]) Index(o O) int {
	for i, x := range a.Outcomes {
		if x == o {
			return i
		}
	}
	return -1
}

// Count is how many results of t had outcome o.
func (a *Adapter[S, R, O]) Count(t Totals, o O) int {
	return t.Counts[a.Index(o)]
}

// CountSelection is a bulk request's size before it runs, for a progress
// total: len(Sources) for a list, count's for a filter (the operation's
// count statement, whose error is translated with step). A Stream cannot
// be counted before it is read (a.Selection).
func (a *Adapter[S, R, O]) CountSelection(ctx context.Context, sel Selection[S], step string, count func() (int, error)) (int, error) {
	switch {
	case sel.Stream != nil:
		return 0, a.Selection.Newf("%s %s stream cannot be counted before it is read", a.Noun, a.Item)
	case !sel.Filter:
		return len(sel.Sources), nil
	}
	n, err := count()
	if err != nil {
		return 0, dberr.Translate(ctx, step, err)
	}
	return n, nil
}

// MaxJobs is a filter's limit as a count statement's cap: the limit when
// set and representable, else the largest int32.
func MaxJobs(limit int) int32 {
	if limit > 0 && limit < math.MaxInt32 {
		return int32(limit)
	}
	return math.MaxInt32
}

// Alone does one handed-back source in a transaction of its own, as the
// operation's single form does it: owned (which begins and commits its
// own transaction), or in a dry run joined on a READ COMMITTED
// transaction of op that is rolled back after.
func Alone[O any](ctx context.Context, pool *pgxpool.Pool, dryRun bool, op string,
	owned func(context.Context) (O, error), joined func(context.Context, pgx.Tx) (O, error)) (O, error) {
	if !dryRun {
		return owned(ctx)
	}
	tx, err := pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		var zero O
		return zero, dberr.Translate(ctx, "begin "+op+" transaction", err)
	}
	defer txn.Rollback(ctx, tx)
	return joined(ctx, tx)
}

// Keyset is a filter's page function made of the operation's two
// statements: the page's select after a keyset cursor and, on the first
// page with Count, the count of the whole selection, which rides the
// select's round trip (with BEGIN, the page being the chunk's first).
// Row is the select's row type.
type Keyset[S, Row any] struct {
	// Noun names the statements' steps: "count <Noun> sources" and
	// "select <Noun> sources".
	Noun string
	// Count counts the selection from the start, at most the filter's
	// limit, below until (nil: the database's now()).
	Count func(ctx context.Context, q db.DBTX, until *time.Time) (int, error)
	// Select reads at most max sources after the cursor (nil on the first
	// page) below until (nil: now(), which each row then returns).
	Select func(ctx context.Context, q db.DBTX, afterAt *time.Time, afterID *uuid.UUID, until *time.Time, max int32) ([]Row, error)
	// Source is a row's source, its place in the keyset order and the
	// upper bound the select used.
	Source func(Row) (S, Cursor, time.Time)
}

// Page selects the next page of q in the session's transaction (Filter.Page).
func (k Keyset[S, Row]) Page(ctx context.Context, s *txn.Session, q PageQuery) (Page[S], error) {
	var page Page[S]
	var afterAt *time.Time
	var afterID *uuid.UUID
	if q.After != nil {
		at, id := q.After.At, q.After.ID
		afterAt, afterID = &at, &id
	}
	bt := s.Batch(ctx)
	var count *txn.Step[int]
	if q.Count {
		count = txn.Queue(bt, "count "+k.Noun+" sources", func(d db.DBTX) (int, error) {
			return k.Count(ctx, d, q.Until)
		})
	}
	st := txn.Queue(bt, "select "+k.Noun+" sources", func(d db.DBTX) ([]Row, error) {
		return k.Select(ctx, d, afterAt, afterID, q.Until, int32(q.Max))
	})
	if err := bt.Send(ctx); err != nil {
		return page, err
	}
	if count != nil {
		page.Count, page.Counted = count.Val, true
	}
	page.Sources = make([]S, 0, len(st.Val))
	for _, r := range st.Val {
		src, next, until := k.Source(r)
		page.Sources = append(page.Sources, src)
		page.Next, page.Until = next, until
	}
	return page, nil
}
