package txn

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/runledger-go/runledger/db"
	"github.com/runledger-go/runledger/internal/dberr"
	"github.com/runledger-go/runledger/internal/failpoint"
)

// A Batch is one round trip of a Session: generated statements queued
// through a recorder, sent as one pgx batch, their results read back into
// Steps by the same generated methods.

// errNotReached is the result of a statement its batch never reached.
var errNotReached = errors.New("txn: statement not reached: the batch failed before it")

// errQueued is what a generated method gets from the recorder; ignored.
var errQueued = errors.New("txn: statement queued in a batch, not run")

// Batch is the statements of one round trip. Queue adds them; Send sends
// them and fills each Step.
type Batch struct {
	s      *Session
	segs   []*segment
	steps  []*stepInfo
	begin  *Step[struct{}]
	commit *Step[pgconn.CommandTag]
}

// segment is the statements queued after a Point (or from the start).
// Unless a test enabled the point's failpoint, segments are sent as one.
type segment struct {
	b     pgx.Batch
	point string
	arg   any
	when  func() bool
}

type stepInfo struct {
	what string
	err  *error
}

// Batch starts the next round trip. In an owned session the first batch
// begins with BEGIN ISOLATION LEVEL READ COMMITTED.
func (s *Session) Batch(ctx context.Context) *Batch {
	b := &Batch{s: s, segs: []*segment{{}}}
	if s.Owned() && !s.open {
		s.open = true
		b.begin = Queue(b, "begin "+s.op+" transaction", func(q db.DBTX) (struct{}, error) {
			return struct{}{}, queries.TransactionBeginReadCommitted(ctx, q)
		})
		b.Point(FailpointAfterBegin, FailpointCall{Op: s.op})
	}
	return b
}

// Commit ends an owned session's batch with COMMIT (after the statements
// queued so far; queue nothing after it). In a joined session it does
// nothing.
func (b *Batch) Commit(ctx context.Context) {
	if !b.s.Owned() {
		return
	}
	b.Point(FailpointBeforeCommit, FailpointCall{Op: b.s.op})
	b.commit = Queue(b, "commit "+b.s.op+" transaction", func(q db.DBTX) (pgconn.CommandTag, error) {
		return queries.TransactionCommit(ctx, q)
	})
}

// Step is where the result of one queued statement lands once its batch
// is sent: Val and Err, where Err is nil, pgx.ErrNoRows for a :one
// statement without a row, the statement's own failure, or, for a
// statement the batch did not reach, an error for which Reached is false.
type Step[T any] struct {
	Val T
	Err error
}

// Reached reports whether the statement ran (with or without an error).
func (s *Step[T]) Reached() bool { return s.Err != errNotReached }

// Row reports whether the statement ran and returned its row.
func (s *Step[T]) Row() bool { return s.Err == nil }

// Queue adds the statement that run executes (a generated method called on
// the DBTX it is given) to b, named what in error details, and returns
// where its result will be. SQL text, arguments and scanning stay sqlc's.
func Queue[T any](b *Batch, what string, run func(db.DBTX) (T, error)) *Step[T] {
	seg := &b.segs[len(b.segs)-1].b
	_, _ = run(recorder{seg})
	st := &Step[T]{Err: errNotReached}
	qq := seg.QueuedQueries[len(seg.QueuedQueries)-1]
	// Results are read by the callbacks, which pgx runs inside
	// BatchResults.Close: a statement error ends the reading and Close
	// finishes the pipeline, leaving the connection ready for ROLLBACK.
	qq.Fn = func(br pgx.BatchResults) error {
		st.Val, st.Err = run(reader{br: br, sql: qq.SQL})
		if st.Err != nil && !errors.Is(st.Err, pgx.ErrNoRows) {
			return st.Err
		}
		return nil
	}
	b.steps = append(b.steps, &stepInfo{what: what, err: &st.Err})
	return st
}

// Point marks the failpoint name (with arg) between the statements queued
// before and after it. Normally it costs nothing and the batch stays one
// round trip; when a test enabled the failpoint, the batch is sent in two
// parts with the hook run in between, so a test can act between two
// statements that otherwise share a round trip. Each statement runs alike
// either way: in order, each with a snapshot of its own, an error skipping
// the rest.
func (b *Batch) Point(name string, arg any) { b.PointIf(name, arg, nil) }

// PointIf is Point whose hook runs only if when (evaluated once the
// statements before it have their results; nil means always) is true.
func (b *Batch) PointIf(name string, arg any, when func() bool) {
	b.segs = append(b.segs, &segment{point: name, arg: arg, when: when})
}

// Send sends the batch in one round trip, fills every Step, and returns
// the error that ended it, as a *runledger.Error:
//   - a statement the server refused (the batch stops there, and a
//     transaction it ran in is aborted): that statement's error;
//   - COMMIT refused, or the connection lost once a batch carrying COMMIT
//     was sent: an error matching runledger.ErrCommitUnconfirmed;
//   - ctx ending while the batch is in flight: the server is asked to
//     cancel the running statement (one waiting on a lock answers 57014)
//     and the batch is read to its end, so the outcome is known: a
//     transient error wrapping ctx's error unless COMMIT succeeded first,
//     in which case the batch succeeded;
//   - anything else (the connection lost): transient.
//
// An owned session's failed transaction is rolled back by End.
func (b *Batch) Send(ctx context.Context) error {
	s := b.s
	if err := ctx.Err(); err != nil {
		// Nothing is sent.
		return dberr.Translate(ctx, b.steps[0].what, err)
	}
	batchErr, canceled := b.send(ctx)
	if canceled {
		s.discard = true
	}
	i, err := b.firstError(batchErr)
	if i < 0 && b.commit != nil && b.commit.Val.String() != "COMMIT" {
		i, err = len(b.steps)-1, fmt.Errorf("COMMIT answered %q: the transaction had failed", b.commit.Val.String())
	}
	if i < 0 {
		if b.commit != nil {
			s.open, s.committed = false, true
		}
		return nil
	}
	what := b.steps[i].what
	switch {
	case b.commit != nil && i == len(b.steps)-1:
		s.discard = s.discard || !serverReported(err)
		return dberr.CommitUnconfirmed(what, err)
	case serverReported(err):
		return dberr.Translate(ctx, what, err)
	case b.commit != nil && !pgconn.SafeToRetry(err):
		// Sent, and no answer: COMMIT may have run.
		s.discard = true
		return dberr.CommitUnconfirmed(b.steps[len(b.steps)-1].what, err)
	default:
		// Nothing sent (a context that ended between two parts) leaves the
		// connection sound: End rolls back. Anything else, it is given up.
		s.discard = s.discard || !pgconn.SafeToRetry(err)
		return dberr.Translate(ctx, what, err)
	}
}

// send sends the batch and reads it to its end. ctx's values reach pgx
// (tracers) but its end does not: when ctx ends mid-batch a cancel request
// goes to the server (again every RollbackTimeout, up to cancelAttempts
// times), whose answer ends the batch; with no answer the connection is
// abandoned. canceled reports that a cancel request was sent.
func (b *Batch) send(ctx context.Context) (err error, canceled bool) {
	parts := []*pgx.Batch{&b.segs[0].b}
	points := []*segment{nil}
	for _, seg := range b.segs[1:] {
		if failpoint.Wanted(ctx, seg.point) {
			parts, points = append(parts, &seg.b), append(points, seg)
			continue
		}
		last := parts[len(parts)-1]
		last.QueuedQueries = append(last.QueuedQueries, seg.b.QueuedQueries...)
	}
	for i, part := range parts {
		if p := points[i]; p != nil && (p.when == nil || p.when()) {
			failpoint.Inject(ctx, p.point, p.arg)
		}
		if len(part.QueuedQueries) == 0 {
			continue
		}
		if i > 0 && ctx.Err() != nil {
			// A hook let ctx end between two parts: send no more, as a
			// batch ctx ended before would not have been sent.
			return notSent{ctx.Err()}, canceled
		}
		var c bool
		err, c = b.sendPart(ctx, part)
		canceled = canceled || c
		if err != nil {
			return err, canceled
		}
		if i < len(parts)-1 && b.stopped() {
			return nil, canceled
		}
	}
	return nil, canceled
}

// stopped reports whether a statement already sent failed, so that the
// parts after it are not sent (as in one batch, an error skips the rest).
func (b *Batch) stopped() bool {
	for _, st := range b.steps {
		if err := *st.err; err != nil && err != errNotReached && !errors.Is(err, pgx.ErrNoRows) {
			return true
		}
	}
	return false
}

// sendPart sends one pgx batch; see send.
func (b *Batch) sendPart(ctx context.Context, part *pgx.Batch) (err error, canceled bool) {
	if ctx.Done() == nil {
		return b.s.conn.SendBatch(ctx, part).Close(), false
	}
	pc := b.s.conn.Conn().PgConn()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		select {
		case <-stop:
			return
		case <-ctx.Done():
		}
		canceled = true
		// A cancel request is a connection of its own to the server; on a
		// loaded server one can be lost or land before the statement it
		// targets, so it is sent again until the pipeline ends.
		for range cancelAttempts {
			cctx, cancel := context.WithTimeout(context.Background(), RollbackTimeout)
			_ = pc.CancelRequest(cctx)
			cancel()
			select {
			case <-stop:
				return
			case <-time.After(RollbackTimeout):
			}
		}
		_ = pc.Conn().SetDeadline(time.Now()) // no answer: give the connection up
	}()
	err = b.s.conn.SendBatch(context.WithoutCancel(ctx), part).Close()
	close(stop)
	wg.Wait()
	return err, canceled
}

// cancelAttempts bounds the cancel requests sent for one pipeline: each
// waits up to RollbackTimeout for the server's answer.
const cancelAttempts = 3

// firstError returns the index and error of the statement that ended the
// batch, or -1 when none did.
func (b *Batch) firstError(batchErr error) (int, error) {
	for i, st := range b.steps {
		switch err := *st.err; {
		case err == errNotReached:
			if batchErr == nil {
				batchErr = errors.New("txn: batch ended before this statement")
			}
			return i, batchErr
		case err != nil && !errors.Is(err, pgx.ErrNoRows):
			return i, err
		}
	}
	if batchErr != nil {
		return len(b.steps) - 1, batchErr
	}
	return -1, nil
}

// notSent is the failure of a part of a batch that was never sent.
type notSent struct{ error }

func (e notSent) Unwrap() error     { return e.error }
func (e notSent) SafeToRetry() bool { return true }

// serverReported reports an error the server sent for a statement.
func serverReported(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr)
}

// recorder queues a statement instead of running it.
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
// queued it; a method whose SQL is not the queued statement's gets an
// error instead.
type reader struct {
	br  pgx.BatchResults
	sql string
}

func (r reader) check(sql string) error {
	if sql != r.sql {
		return errors.New("txn: batch result read by another statement than the one queued")
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
