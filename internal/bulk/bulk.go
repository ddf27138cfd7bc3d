// Package bulk is the engine of the library's bulk operations: it walks a
// selection of sources chunk by chunk, each chunk one READ COMMITTED
// transaction of its own on the session engine (internal/txn), and does
// the same way for every operation what such an action needs around the
// operation's own statements:
//
//   - selection: a streamed list (read as the action goes, a chunk at a
//     time) or a filter's pages behind a keyset cursor, each page selected
//     in its chunk's transaction, with an open upper bound pinned to the
//     database's time at the first page and kept for every later page;
//   - chunking: a transaction per chunk, no lock held from one chunk to the
//     next, memory bounded by the chunk size;
//   - throttle: a token bucket refilled from the last write, so time spent
//     on chunks that write nothing is not credit for a burst later;
//   - deadlock retry: a chunk that fails with 40P01 runs again in a new
//     transaction;
//   - sources a chunk hands back to be done one by one after its
//     transaction (throttled like the rest);
//   - reporting: each chunk's results, running totals by outcome, elapsed
//     time, the selection's size when known, the pinned bound;
//   - a soft stop (the chunk in flight finishes, no other begins), a
//     context that stops at once, and dry runs.
//
// An operation plugs in with a Spec: its source and result types, the
// function that runs one chunk's statements on the session, the function
// that does one handed-back source alone, and how to classify a result.
// The chunk function must lock its sources in one order (by id) so that
// chunks over overlapping sources wait for each other instead of
// deadlocking; the engine cannot check that.
//
// A public bulk request (replay's, requeue's) runs through an Adapter: the
// operation declares its validation codes, outcomes and source identity
// once, and the Adapter validates the selection, filter window and pace,
// builds the Spec, counts outcomes and gives the filter's page function
// (Keyset) and the dry run of a handed-back source (Alone); the operation
// keeps only its statements and its public types.
//
// It is a foundation: it imports the session engine, error translation,
// the text rules (internal/validate) and the generated queries' types,
// nothing above them.
package bulk

import (
	"context"
	"errors"
	"iter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runledger-go/runledger/internal/failpoint"
	"github.com/runledger-go/runledger/internal/txn"
)

// DeadlockAttempts bounds how often one chunk's transaction runs when it
// keeps failing with a deadlock (SQLSTATE 40P01).
const DeadlockAttempts = 3

// ErrStopped is returned (wrapped) by Run when Spec.Stop was closed before
// the selection was done: the chunks reported before stay committed, and
// no chunk was begun after the stop was seen.
var ErrStopped = errors.New("bulk action stopped before its selection was done")

// Failpoints of the engine, each fired with a FailpointCall.
const (
	// FailpointAfterSelect: a filter's page is selected in the chunk's
	// transaction (no lock taken); the chunk function is next.
	FailpointAfterSelect = "bulk/after-select"
	// FailpointAfterChunk: a chunk has ended (committed, or rolled back in
	// a dry run), its handed-back sources are done and it was reported;
	// the next chunk is next.
	FailpointAfterChunk = "bulk/after-chunk"
)

func init() { failpoint.Declare(FailpointAfterSelect, FailpointAfterChunk) }

// FailpointCall identifies a chunk at a failpoint: the action's label
// (Spec.Label), the chunk's index from 0 and the attempt of its
// transaction from 1. Operations fire their own failpoints inside a chunk
// with it too (Call.Failpoint).
type FailpointCall struct {
	Label   string
	Chunk   int
	Attempt int
}

// Spec is one bulk action: where its sources come from, how a chunk of
// them is done, and how the results are counted. S is the operation's
// source, R its per-source result.
type Spec[S, R any] struct {
	// Pool gives each chunk its connection.
	Pool *pgxpool.Pool
	// Op names each chunk's transaction (internal/txn's operation name, in
	// error details and at its failpoints).
	Op string
	// Label identifies the action at failpoints (the request key, say).
	Label string

	// List is an explicit selection, pulled a chunk at a time as the
	// action goes: the engine holds at most one chunk of it. An error it
	// yields stops the action before the chunk being formed. Exactly one
	// of List and Filter is set.
	List iter.Seq2[S, error]
	// Expected is the number of sources List yields, when the caller knows
	// it; it is only reported (Chunk.Expected).
	Expected int
	// CheckList, when set, checks each chunk of List once it is formed,
	// before it begins (index counts chunks from 0); its error stops the
	// action there, the chunks before it staying committed.
	CheckList func(sources []S, index int) error
	// Filter selects the sources page by page instead.
	Filter *Filter[S]

	// ChunkSize is the number of sources per chunk (positive).
	ChunkSize int
	// Rate is at most how many results that write (Wrote) are made per
	// second, 0 for no limit. See Run for the bucket.
	Rate int
	// DryRun tells the engine that chunks roll back (the chunk function
	// does not commit): nothing is throttled.
	DryRun bool
	// Stop, once closed, ends the action softly: the chunk in flight
	// finishes (and is reported), no other begins, and Run returns
	// ErrStopped. nil never stops.
	Stop <-chan struct{}

	// Chunk runs one chunk's statements on c.Session, whose transaction is
	// open (a filter's page was selected in it) or begins with the first
	// batch (a list). It must lock the sources it writes for in one order,
	// by id, and commit in its last batch (not in a dry run). It returns
	// one result per source, in the order given, and the sources to be
	// done alone after the transaction (their results are placeholders
	// until then). An error rolls the chunk back and stops the action,
	// except a deadlock, after which the chunk runs again.
	Chunk func(ctx context.Context, c Call, sources []S) (Done[S, R], error)
	// One does a handed-back source alone, in a transaction of its own (a
	// dry run rolls it back). An error stops the action after the chunk
	// committed and before it is reported.
	One func(ctx context.Context, src S) (R, error)
	// Outcomes is the number of outcomes an operation's result can have;
	// Outcome maps a result to its index in [0, Outcomes).
	Outcomes int
	Outcome  func(R) int
	// Wrote reports whether a result wrote what the rate limits (a replay
	// inserted, a job requeued).
	Wrote func(R) bool
}

// Call is what a chunk function is given besides its sources: the
// chunk's session and where it stands.
type Call struct {
	// Session is the chunk's owned session.
	Session *txn.Session
	// Index counts chunks from 0; Attempt counts this chunk's transactions
	// from 1 (more after a deadlock).
	Index, Attempt int
	// DryRun: do not commit; End rolls the transaction back.
	DryRun bool
	label  string
}

// Failpoint is the FailpointCall of this chunk, for an operation's own
// failpoints inside it.
func (c Call) Failpoint() FailpointCall {
	return FailpointCall{Label: c.label, Chunk: c.Index, Attempt: c.Attempt}
}

// Done is what a chunk function returns: a result per source, in order,
// and the sources to do alone (Later).
type Done[S, R any] struct {
	Results []R
	Later   []Later[S]
}

// Later is a source a chunk hands back: Index is its place in the chunk's
// results, Source what One is called with (it may differ from the source
// the chunk got, a filter's run observed anew, say).
type Later[S any] struct {
	Index  int
	Source S
}

// Totals counts an action's results so far.
type Totals struct {
	// Selected is the number of sources done.
	Selected int
	// Wrote is the number of results that wrote (Spec.Wrote).
	Wrote int
	// Counts splits Selected by outcome index (Spec.Outcome); its length
	// is Spec.Outcomes.
	Counts []int
}

func (t Totals) clone() Totals {
	t.Counts = append([]int(nil), t.Counts...)
	return t
}

// Chunk is what Run reports after each chunk has ended (committed, or in
// a dry run rolled back) and its handed-back sources are done.
type Chunk[R any] struct {
	// Index counts chunks from 0.
	Index int
	// Attempts is how many times its transaction ran: 1, or more when a
	// deadlock made it run again.
	Attempts int
	// Results are the chunk's, in source order (list order, or the
	// filter's order).
	Results []R
	// Counts splits this chunk's results by outcome index.
	Counts []int
	// Totals are the running totals, this chunk included.
	Totals Totals
	// Elapsed is the time since Run was called.
	Elapsed time.Duration
	// Expected is the number of sources the action selects in all when
	// known: Spec.Expected for a list, the count made in the first page's
	// transaction for a filter with Count; 0 otherwise.
	Expected int
	// Until is a filter's upper bound as every page used it: the caller's,
	// or, for an open-ended filter, the database's time at the first page.
	// nil for a list.
	Until *time.Time
}

// Run runs the action and returns its totals, also on error (the chunks
// reported before an error stay committed).
//
// Before each chunk it checks ctx and Stop, then waits for the throttle
// (Stop ends the wait). Each chunk is one transaction: for a filter the
// page is selected first in it, then the chunk function runs; a
// deadlock (40P01) rolls the chunk back and runs it again, reselecting a
// filter's page from the same cursor, at most DeadlockAttempts times in
// all. After the transaction the handed-back sources are done one by one,
// then the chunk is reported to onChunk (may be nil), whose error stops the
// action and is returned. A filter ends with a page shorter than asked for
// (or its limit); a list when it yields no more.
//
// The throttle (Rate > 0, not in a dry run) is a token bucket of
// capacity ChunkSize (which a rate below it lowers to Rate) refilled at
// Rate per second: a chunk begins once the bucket holds a token for each
// of its sources, and a handed-back source once it holds one; the tokens
// of what was written are taken when the chunk's transaction (or the
// source's) has ended, so the bucket refills from the last write. Chunks
// that write nothing take nothing: a rerun walking sources already done
// goes at full speed, and the writes after it still come at most Rate per
// second, never more than one chunk's worth at once.
//
// A canceled ctx stops at once: a statement in flight is canceled, the
// open chunk rolls back, and the error wraps ctx.Err().
func Run[S, R any](ctx context.Context, sp Spec[S, R], onChunk func(Chunk[R]) error) (Totals, error) {
	a := &action[S, R]{sp: sp, onChunk: onChunk, start: time.Now(),
		totals: Totals{Counts: make([]int, sp.Outcomes)}}
	if err := a.check(); err != nil {
		return a.totals, err
	}
	size := sp.ChunkSize
	if sp.Rate > 0 && !sp.DryRun {
		size = min(size, sp.Rate)
		a.bucket = newBucket(sp.Rate, size, a.start)
	}
	a.size = size
	if sp.Filter != nil {
		a.until = sp.Filter.Until
		return a.totals, a.byFilter(ctx)
	}
	return a.totals, a.byList(ctx)
}

// Slice yields the sources of an explicit list held in memory, as Spec.List
// reads a list.
func Slice[S any](list []S) iter.Seq2[S, error] {
	return func(yield func(S, error) bool) {
		for _, s := range list {
			if !yield(s, nil) {
				return
			}
		}
	}
}
