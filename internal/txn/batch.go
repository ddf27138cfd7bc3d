package txn

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
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
	// autocommit: the batch runs outside a transaction on an owned
	// session, so each statement commits on its own.
	autocommit bool
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
	sql  string
	err  *error
}

func (st *stepInfo) reached() bool { return *st.err != errNotReached }

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

// AutocommitBatch starts a round trip of an owned session that runs
// outside any transaction: each statement commits as it ends, so a batch
// that was sent and got no answer may have written (Send then returns an
// error matching runledger.ErrCommitUnconfirmed). Queue writes that are
// one statement each, and no Commit. In a joined session it is Batch.
func (s *Session) AutocommitBatch(ctx context.Context) *Batch {
	if !s.Owned() || s.open {
		return s.Batch(ctx)
	}
	return &Batch{s: s, segs: []*segment{{}}, autocommit: true}
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
	b.steps = append(b.steps, &stepInfo{what: what, sql: qq.SQL, err: &st.Err})
	return st
}

// QueueShow adds a SHOW statement (a generated method that sqlc gives no
// result column, since it cannot type SHOW) and returns where the
// setting's value, as text, will be.
func QueueShow(b *Batch, what string, run func(db.DBTX) error) *Step[string] {
	seg := &b.segs[len(b.segs)-1].b
	_ = run(recorder{seg})
	st := &Step[string]{Err: errNotReached}
	qq := seg.QueuedQueries[len(seg.QueuedQueries)-1]
	qq.Fn = func(br pgx.BatchResults) error {
		st.Val, st.Err = showValue(br)
		return st.Err
	}
	b.steps = append(b.steps, &stepInfo{what: what, sql: qq.SQL, err: &st.Err})
	return st
}

// showValue reads the one text value a SHOW returns.
func showValue(br pgx.BatchResults) (string, error) {
	rows, err := br.Query()
	if err != nil {
		return "", err
	}
	defer rows.Close()
	var v string
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return "", err
		}
		return "", errors.New("txn: SHOW returned no row")
	}
	raw := rows.RawValues()
	if len(raw) != 1 {
		return "", fmt.Errorf("txn: SHOW returned %d columns", len(raw))
	}
	v = string(raw[0])
	rows.Close()
	return v, rows.Err()
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
//     in which case the batch succeeded. When the server does not answer
//     within Grace (a stalled network) the connection is given up and the
//     error, commit-unconfirmed for a batch carrying COMMIT, still wraps
//     ctx's error;
//   - a batch pgx could not build (an argument it cannot encode): nothing
//     was sent, db.query_failed naming the batch;
//   - anything else (the connection lost): transient.
//
// An owned session's failed transaction is rolled back by End. In a
// joined session whose cancel request the server did not confirm within
// Grace, the caller's connection is closed: a late cancel must not reach
// the caller's next statement, and its transaction is lost anyway.
func (b *Batch) Send(ctx context.Context) error {
	s := b.s
	if err := ctx.Err(); err != nil {
		// Nothing is sent.
		return dberr.Translate(ctx, "send "+s.op+" statements", err)
	}
	r := b.send(ctx)
	if r.canceled {
		s.discard = true
	}
	if s.graceUntil.IsZero() && !r.graceUntil.IsZero() {
		s.graceUntil = r.graceUntil
	}
	if r.unconfirmed && !s.Owned() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cleanupTimeout(ctx))
		_ = s.conn.Conn().Close(cctx)
		cancel()
	}
	i, err := b.firstError(r.err)
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
	case b.unsent(err):
		// pgx failed before any statement ran: it could not encode an
		// argument (db.query_failed), or the connection failed while it
		// prepared the statements (transient: nothing was written).
		if b.begin != nil {
			s.open = false
		}
		s.discard = s.discard || netFailure(err)
		return dberr.Translate(ctx, b.unsentWhat(err), clientError{err})
	case b.commit != nil && i == len(b.steps)-1:
		s.discard = s.discard || !serverReported(err)
		return dberr.CommitUnconfirmed(ctx, what, err)
	case serverReported(err):
		return dberr.Translate(ctx, what, err)
	case b.autocommit && !pgconn.SafeToRetry(err):
		// Sent, and no answer: the statement may have run and committed.
		s.discard = true
		return dberr.CommitUnconfirmed(ctx, what, err)
	case b.commit != nil && !pgconn.SafeToRetry(err):
		// Sent, and no answer: COMMIT may have run.
		s.discard = true
		return dberr.CommitUnconfirmed(ctx, b.steps[len(b.steps)-1].what, err)
	default:
		// Nothing sent (a context that ended between two parts) leaves the
		// connection sound: End rolls back. Anything else, it is given up.
		s.discard = s.discard || !pgconn.SafeToRetry(err)
		return dberr.Translate(ctx, what, err)
	}
}

// unsent reports a batch that failed before any of its statements ran:
// pgx reported a preprocessing error, or no statement reached with the
// connection intact and an error neither the server's nor the network's.
func (b *Batch) unsent(err error) bool {
	if b.steps[0].reached() || serverReported(err) {
		return false
	}
	var pre pgx.ErrPreprocessingBatch
	if errors.As(err, &pre) {
		// Only a statement's Parse and Describe may have been sent (pgx
		// may close the connection after); nothing ran.
		return true
	}
	if b.s.conn.Conn().PgConn().IsClosed() {
		return false
	}
	return !netFailure(err) && !pgconn.Timeout(err) && !errors.Is(err, errNotSentPart)
}

// netFailure reports an error of the connection itself: the network, a
// deadline, the stream ending.
func netFailure(err error) bool {
	var nerr net.Error
	return errors.As(err, &nerr) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed)
}

// unsentWhat names what failed in a batch none of whose statements ran:
// the connection, while pgx prepared the statements; else the statement
// pgx could not encode, or the batch.
func (b *Batch) unsentWhat(err error) string {
	if netFailure(err) {
		return "prepare the statements of " + b.s.op + " (none ran)"
	}
	var pre pgx.ErrPreprocessingBatch
	if errors.As(err, &pre) {
		for _, st := range b.steps {
			if st.sql == pre.SQL() {
				return "encode the arguments of " + st.what + " (nothing was sent)"
			}
		}
	}
	return "encode the statements of " + b.s.op + " (nothing was sent)"
}

// clientError marks a failure pgx reported before sending anything.
type clientError struct{ error }

func (e clientError) Unwrap() error { return e.error }

// sendResult is what sending a batch came to: the error that ended it,
// whether a cancel request was sent, and whether one was sent that the
// server did not confirm (or the connection was given up for want of an
// answer), so a late cancel may still reach the connection.
type sendResult struct {
	err                   error
	canceled, unconfirmed bool
	graceUntil            time.Time
}

// send sends the batch and reads it to its end. ctx's values reach pgx
// (tracers) but its end does not: when ctx ends mid-batch a cancel request
// goes to the server, again every cancelResend within Grace, whose answer
// ends the batch; with no answer within Grace the connection is given up.
func (b *Batch) send(ctx context.Context) sendResult {
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
	var r sendResult
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
			r.err = notSent{ctx.Err()}
			return r
		}
		pr := b.sendPart(ctx, part)
		r.canceled = r.canceled || pr.canceled
		r.unconfirmed = r.unconfirmed || pr.unconfirmed
		if !pr.graceUntil.IsZero() {
			r.graceUntil = pr.graceUntil
		}
		if pr.err != nil {
			r.err = pr.err
			return r
		}
		if i < len(parts)-1 && b.stopped() {
			return r
		}
	}
	return r
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
func (b *Batch) sendPart(ctx context.Context, part *pgx.Batch) sendResult {
	if ctx.Done() == nil {
		return sendResult{err: b.s.conn.SendBatch(ctx, part).Close()}
	}
	pc := b.s.conn.Conn().PgConn()
	stop := make(chan struct{})
	var r sendResult
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		select {
		case <-stop:
			return
		case <-ctx.Done():
		}
		r.canceled = true
		// A cancel request is a connection of its own to the server; on a
		// loaded server one can be lost or land before the statement it
		// targets, so it is sent again until the pipeline ends, within
		// Grace. Each waits for the server to confirm it.
		deadline := time.Now().Add(Grace)
		r.graceUntil = deadline
		for {
			cctx, cancel := context.WithDeadline(context.Background(), deadline)
			if err := pc.CancelRequest(cctx); err != nil {
				r.unconfirmed = true
			}
			cancel()
			wait := time.Until(deadline)
			if wait <= 0 {
				break
			}
			select {
			case <-stop:
				return
			case <-time.After(min(cancelResend, wait)):
			}
			if !time.Now().Before(deadline) {
				break
			}
		}
		// No answer within Grace: give the connection up, which ends the
		// read below.
		r.unconfirmed = true
		_ = pc.Conn().SetDeadline(time.Now())
	}()
	err := b.s.conn.SendBatch(context.WithoutCancel(ctx), part).Close()
	close(stop)
	wg.Wait()
	r.err = err
	return r
}

// cancelResend is how long a cancel request is given to take effect before
// it is sent again.
const cancelResend = 250 * time.Millisecond

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

// errNotSentPart is matched by every notSent.
var errNotSentPart = errors.New("txn: batch part not sent")

func (e notSent) Is(target error) bool { return target == errNotSentPart }

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
