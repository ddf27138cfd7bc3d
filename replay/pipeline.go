package replay

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/runledger-go/runledger/db"
)

// Pipelining generated statements.
//
// A generated method (package db) runs its statement through a db.DBTX and
// scans the result. To send several statements in one round trip, queue
// calls the method twice: at once on a recorder, which adds the statement
// to a pgx.Batch instead of running it, and, once the batch is sent, on a
// reader, which gives the method that statement's result to scan. SQL
// text, argument order and scanning thus stay sqlc's; no SQL is written
// here.
//
// pgx sends a batch as one pipeline ending in a single Sync: the server
// runs the statements one after another, each under READ COMMITTED with a
// snapshot of its own taken when it starts (so after the statement before
// it finished, lock waits included), and an error skips the rest of the
// batch. With the prepared-statement cache on (pgx's default) and warm, a
// batch is exactly one round trip.
//
// Results are read by the batch items' callbacks, which pgx runs inside
// BatchResults.Close: a statement error ends the reading and Close
// finishes the pipeline, leaving the connection in the failed
// transaction, ready for ROLLBACK (never busy, so a pooled connection is
// not destroyed for it).

// conn is where the operation's statements go: the caller's pgx.Tx, or a
// pooled connection (*pgxpool.Conn) whose transaction SucceededJob runs by
// hand.
type conn interface {
	db.DBTX
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// errNotReached is the result of a statement whose batch failed before it.
var errNotReached = errors.New("replay: statement not reached: the batch failed before it")

// errQueued is what a generated method gets from the recorder; ignored.
var errQueued = errors.New("replay: statement queued in a pipeline, not run")

// pipeline collects generated statements for one round trip.
type pipeline struct {
	batch pgx.Batch
}

// step is the result of one queued statement, set once the batch is sent:
// its value and error (pgx.ErrNoRows for a :one statement without a row),
// or errNotReached.
type step[T any] struct {
	val T
	err error
}

// queue adds the statement that run executes (a generated method called on
// the DBTX it is given) to p, and returns where its result will be.
func queue[T any](p *pipeline, run func(db.DBTX) (T, error)) *step[T] {
	_, _ = run(recorder{&p.batch})
	s := &step[T]{err: errNotReached}
	qq := p.batch.QueuedQueries[len(p.batch.QueuedQueries)-1]
	qq.Fn = func(br pgx.BatchResults) error {
		s.val, s.err = run(reader{br: br, sql: qq.SQL})
		if s.err != nil && !errors.Is(s.err, pgx.ErrNoRows) {
			return s.err // stops the reading; Close returns it
		}
		return nil
	}
	return s
}

// send sends the queued statements in one round trip, reads every result
// into its step, and returns the batch's first error (nil, or the error of
// the first step that failed, or why nothing was sent). No row is not an
// error here.
func (p *pipeline) send(ctx context.Context, c conn) error {
	return c.SendBatch(ctx, &p.batch).Close()
}

// recorder queues a statement instead of running it (with uuidArgs).
type recorder struct{ b *pgx.Batch }

func (r recorder) Exec(_ context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	r.b.Queue(sql, uuidArgs(args)...)
	return pgconn.CommandTag{}, errQueued
}

func (r recorder) Query(_ context.Context, sql string, args ...any) (pgx.Rows, error) {
	r.b.Queue(sql, uuidArgs(args)...)
	return nil, errQueued
}

func (r recorder) QueryRow(_ context.Context, sql string, args ...any) pgx.Row {
	r.b.Queue(sql, uuidArgs(args)...)
	return errRow{errQueued}
}

// reader hands a sent batch's next result to the generated method that
// queued it (scanning with uuidRow); a method whose SQL is not the queued statement's gets an
// error instead.
type reader struct {
	br  pgx.BatchResults
	sql string
}

func (r reader) check(sql string) error {
	if sql != r.sql {
		return fmt.Errorf("replay: pipeline result read by another statement than the one queued")
	}
	return nil
}

func (r reader) Exec(_ context.Context, sql string, _ ...any) (pgconn.CommandTag, error) {
	if err := r.check(sql); err != nil {
		return pgconn.CommandTag{}, err
	}
	return r.br.Exec()
}

func (r reader) Query(_ context.Context, sql string, _ ...any) (pgx.Rows, error) {
	if err := r.check(sql); err != nil {
		return nil, err
	}
	return r.br.Query()
}

func (r reader) QueryRow(_ context.Context, sql string, _ ...any) pgx.Row {
	if err := r.check(sql); err != nil {
		return errRow{err}
	}
	return uuidRow{r.br.QueryRow()}
}

type errRow struct{ err error }

func (e errRow) Scan(...any) error { return e.err }

// firstError returns the error to report for a batch: the first reached
// step's error other than pgx.ErrNoRows, else the batch's own error (which
// belongs to the first statement when nothing was reached). i is the index
// of the step it came from.
func firstError(batchErr error, errs ...error) (i int, err error) {
	for i, err := range errs {
		if err == errNotReached {
			break
		}
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return i, err
		}
	}
	if batchErr != nil {
		for i, err := range errs {
			if err == errNotReached {
				return i, batchErr
			}
		}
		return len(errs) - 1, batchErr
	}
	return -1, nil
}
