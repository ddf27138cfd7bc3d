package bulk

import (
	"context"
	"errors"
	"iter"
	"time"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/internal/dberr"
	"github.com/runledger-go/runledger/internal/errs"
	"github.com/runledger-go/runledger/internal/failpoint"
	"github.com/runledger-go/runledger/internal/txn"
)

// action is one running Run.
type action[S, R any] struct {
	sp      Spec[S, R]
	onChunk func(Chunk[R]) error
	start   time.Time
	size    int
	bucket  *bucket
	totals  Totals
	index   int

	// A filter's state: the cursor after the last page done, the upper
	// bound every page uses once pinned, the sources selected so far and
	// the count made at the first page.
	after    *Cursor
	until    *time.Time
	selected int
	expected int
}

func (a *action[S, R]) check() error {
	sp := a.sp
	switch {
	case (sp.List == nil) == (sp.Filter == nil):
		return errs.Invariant("bulk action needs exactly one of a list and a filter")
	case sp.Filter != nil && sp.Filter.Page == nil:
		return errs.Invariant("bulk filter has no page function")
	case sp.ChunkSize < 1 || sp.Rate < 0:
		return errs.Invariantf("bulk chunk size %d, rate %d", sp.ChunkSize, sp.Rate)
	case sp.Chunk == nil || sp.One == nil || sp.Outcome == nil || sp.Wrote == nil || sp.Outcomes < 1:
		return errs.Invariant("bulk action spec is incomplete")
	}
	return nil
}

func (a *action[S, R]) byList(ctx context.Context) error {
	next, stop := iter.Pull2(a.sp.List)
	defer stop()
	a.expected = a.sp.Expected
	for {
		if err := a.ready(ctx); err != nil {
			return err
		}
		sources := make([]S, 0, a.size)
		for len(sources) < a.size {
			src, err, ok := next()
			if !ok {
				break
			}
			if err != nil {
				return err
			}
			sources = append(sources, src)
		}
		if len(sources) == 0 {
			return nil
		}
		if a.sp.CheckList != nil {
			if err := a.sp.CheckList(sources, a.index); err != nil {
				return err
			}
		}
		if err := a.bucket.wait(ctx, a.sp.Stop, len(sources)); err != nil {
			return a.stopped(ctx, err)
		}
		if _, err := a.chunk(ctx, sources, 0); err != nil {
			return err
		}
	}
}

func (a *action[S, R]) byFilter(ctx context.Context) error {
	limit := a.sp.Filter.Limit
	for {
		max := a.size
		if limit > 0 {
			if a.selected >= limit {
				return nil
			}
			max = min(max, limit-a.selected)
		}
		if err := a.ready(ctx); err != nil {
			return err
		}
		if err := a.bucket.wait(ctx, a.sp.Stop, max); err != nil {
			return a.stopped(ctx, err)
		}
		got, err := a.chunk(ctx, nil, max)
		if err != nil || got < max {
			return err
		}
	}
}

// ready returns the error that keeps the next chunk from beginning: ctx's
// end or the stop.
func (a *action[S, R]) ready(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return dberr.Translate(ctx, a.sp.Op, err)
	}
	select {
	case <-a.sp.Stop:
		return ErrStopped
	default:
		return nil
	}
}

// stopped turns the end of a throttle wait into the action's error.
func (a *action[S, R]) stopped(ctx context.Context, err error) error {
	if errors.Is(err, ErrStopped) {
		return err
	}
	return dberr.Translate(ctx, a.sp.Op, err)
}

// chunk runs one chunk (for a filter, sources is nil and max the page
// size), does its handed-back sources, reports it and returns the number
// of sources it held.
func (a *action[S, R]) chunk(ctx context.Context, sources []S, max int) (int, error) {
	var (
		done    Done[S, R]
		page    Page[S]
		err     error
		attempt int
	)
	for attempt = 1; ; attempt++ {
		done, page, err = a.attempt(ctx, sources, max, attempt)
		if err == nil || attempt == DeadlockAttempts || !isDeadlock(err) {
			break
		}
	}
	if err != nil {
		return 0, err
	}
	if a.sp.Filter != nil {
		if len(page.Sources) == 0 {
			return 0, nil
		}
		sources = page.Sources
	}
	wrote := 0
	for _, r := range done.Results {
		if a.sp.Wrote(r) {
			wrote++
		}
	}
	a.bucket.take(wrote)
	for _, l := range done.Later {
		if err := a.bucket.wait(ctx, nil, 1); err != nil {
			return 0, a.stopped(ctx, err)
		}
		r, err := a.sp.One(ctx, l.Source)
		if err != nil {
			return 0, err
		}
		done.Results[l.Index] = r
		if a.sp.Wrote(r) {
			a.bucket.take(1)
		}
	}

	if a.sp.Filter != nil {
		if a.until == nil {
			u := page.Until
			a.until = &u
		}
		if page.Counted {
			a.expected = page.Count
		}
		next := page.Next
		a.after = &next
		a.selected += len(sources)
	}
	counts := make([]int, a.sp.Outcomes)
	for _, r := range done.Results {
		o := a.sp.Outcome(r)
		if o < 0 || o >= a.sp.Outcomes {
			return 0, errs.Invariantf("bulk result outcome %d out of range", o)
		}
		counts[o]++
		a.totals.Counts[o]++
		a.totals.Selected++
		if a.sp.Wrote(r) {
			a.totals.Wrote++
		}
	}
	c := Chunk[R]{Index: a.index, Attempts: attempt, Results: done.Results, Counts: counts, Totals: a.totals.clone(),
		Elapsed: time.Since(a.start), Expected: a.expected, Until: a.until}
	a.index++
	if a.onChunk != nil {
		if err := a.onChunk(c); err != nil {
			return len(sources), err
		}
	}
	failpoint.Inject(ctx, FailpointAfterChunk, FailpointCall{Label: a.sp.Label, Chunk: c.Index, Attempt: attempt})
	return len(sources), nil
}

// attempt runs one transaction of a chunk: a filter's page, then the chunk
// function. A filter's page that comes back empty ends the transaction
// there.
func (a *action[S, R]) attempt(ctx context.Context, sources []S, max, attempt int) (Done[S, R], Page[S], error) {
	var page Page[S]
	s, err := txn.Own(ctx, a.sp.Pool, a.sp.Op)
	if err != nil {
		return Done[S, R]{}, page, err
	}
	defer s.End(ctx)
	call := Call{Session: s, Index: a.index, Attempt: attempt, DryRun: a.sp.DryRun, label: a.sp.Label}
	if f := a.sp.Filter; f != nil {
		page, err = f.Page(ctx, s, PageQuery{After: a.after, Until: a.until, Max: max, Limit: f.Limit,
			Count: f.Count && a.index == 0})
		if err != nil {
			return Done[S, R]{}, page, err
		}
		if len(page.Sources) > max || (len(page.Sources) > 0 && page.Until.IsZero()) {
			return Done[S, R]{}, page, errs.Invariantf("bulk page of %d sources for %d asked, bound %v", len(page.Sources), max, page.Until)
		}
		if len(page.Sources) == 0 {
			return Done[S, R]{}, page, nil
		}
		failpoint.Inject(ctx, FailpointAfterSelect, call.Failpoint())
		sources = page.Sources
	}
	done, err := a.sp.Chunk(ctx, call, sources)
	if err != nil {
		return done, page, err
	}
	if len(done.Results) != len(sources) {
		return done, page, errs.Invariantf("bulk chunk returned %d results for %d sources", len(done.Results), len(sources))
	}
	for _, l := range done.Later {
		if l.Index < 0 || l.Index >= len(sources) {
			return done, page, errs.Invariantf("bulk chunk handed back source %d of %d", l.Index, len(sources))
		}
	}
	if !a.sp.DryRun && !s.Committed() {
		return done, page, errs.Invariant("bulk chunk function returned without committing")
	}
	return done, page, nil
}

// isDeadlock reports a chunk that PostgreSQL aborted to break a deadlock.
func isDeadlock(err error) bool {
	var re *runledger.Error
	return errors.As(err, &re) && re.SQLState == "40P01"
}
