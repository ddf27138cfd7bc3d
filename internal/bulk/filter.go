package bulk

import (
	"context"
	"time"

	"github.com/google/uuid"

	"github.com/runledger-go/runledger/internal/txn"
)

// Filter is a selection by query, page by page: each page is selected by
// Page in its chunk's transaction, after a keyset cursor (time, then id)
// that the engine moves once the chunk is done, so a chunk that runs
// again after a deadlock selects its page again from the same place.
type Filter[S any] struct {
	// Page selects the next page (see PageQuery and Page).
	Page func(ctx context.Context, s *txn.Session, q PageQuery) (Page[S], error)
	// Until is the caller's upper bound on the cursor's time; nil asks the
	// engine to pin one: the first page bounds itself by the database's
	// time (now(), the first chunk's transaction start) and reports it,
	// and every later page gets that time. Sources whose time comes after
	// it (jobs that finish while the action runs) are never selected.
	Until *time.Time
	// Limit caps the number of sources selected in all; 0 means none.
	Limit int
	// Count asks the first page to count the whole selection (at most
	// Limit) under the same bound, in the same transaction; the engine
	// reports it as Chunk.Expected. It costs a scan of the selection.
	Count bool
}

// PageQuery is what a filter's page function is asked for.
type PageQuery struct {
	// After is the cursor after the last source selected; nil on the
	// first page.
	After *Cursor
	// Until is the upper bound to select below; nil on the first page of
	// an open-ended filter, whose statement then bounds by now() and
	// returns that time.
	Until *time.Time
	// Max is the most sources the page may hold (positive).
	Max int
	// Limit is the filter's limit, 0 for none (for Count).
	Limit int
	// Count: also count the whole selection, from the start, at most
	// Limit, under the same bound (first page only).
	Count bool
}

// Page is one page of a filter's selection.
type Page[S any] struct {
	// Sources are the page's, at most PageQuery.Max, in cursor order.
	Sources []S
	// Next is the cursor after the page's last source.
	Next Cursor
	// Until is the upper bound the page used: PageQuery.Until, or the
	// database's time it pinned. It must be set when Sources is not empty.
	Until time.Time
	// Count is the selection's size when Counted (PageQuery.Count).
	Count   int
	Counted bool
}

// Cursor is a place in a filter's keyset order: a time, then an id.
type Cursor struct {
	At time.Time
	ID uuid.UUID
}
