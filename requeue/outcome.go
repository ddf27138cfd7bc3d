package requeue

import (
	"time"

	"github.com/runledger-go/runledger"
)

// Outcome is the result of a requeue that did not fail: exactly one of
// Requeued, ExpectationMismatch, NotQuiesced or NotFound. The set is
// closed (only this package implements Outcome); handle it with Match,
// which the compiler makes cover all four, or with a type switch.
type Outcome interface {
	isOutcome()
}

// Requeued: the job's observed run is requeued, now (Inserted) or by an
// earlier request with the same job, status, run and reason (Existing).
type Requeued struct {
	Disposition runledger.Disposition
	// Before is the job as it was when locked, just before the requeue;
	// nil when Existing (nothing was written now).
	Before *runledger.Job
	// After is the job as the requeue left it (PENDING at the next run)
	// when Inserted, and as it is now when Existing (it may have run,
	// failed or been requeued again since; the row is not locked).
	After runledger.Job
	// EventID is the id of the REQUEUED event written; nil when Existing.
	EventID *int64
}

// ExpectationMismatch: the job exists in the caller's scope but is not in
// the expected status at the expected run (and that run was not requeued
// with this reason). Nothing was written.
type ExpectationMismatch struct {
	// Actual is the job as it is now.
	Actual runledger.Job
}

// NotQuiesced: the job is CANCELED at the expected run but the lease of
// its canceled attempt has not run out by the database clock, so its
// worker may still be running it; requeueing now could run the job twice
// at once. Nothing was written or locked. Retry at RetryAfter.
type NotQuiesced struct {
	// Actual is the job as it is now.
	Actual runledger.Job
	// RetryAfter is the canceled lease's expiry.
	RetryAfter time.Time
}

// NotFound: no job with that id exists in the caller's scope (a job in
// another scope is reported the same way). Nothing was written or locked.
type NotFound struct{}

func (Requeued) isOutcome()            {}
func (ExpectationMismatch) isOutcome() {}
func (NotQuiesced) isOutcome()         {}
func (NotFound) isOutcome()            {}

// Match calls the function for o's kind and returns its result. A nil or
// unknown outcome panics: Job and JobTx never return one together with a
// nil error.
func Match[T any](o Outcome, requeued func(Requeued) T, mismatch func(ExpectationMismatch) T,
	notQuiesced func(NotQuiesced) T, notFound func(NotFound) T) T {
	switch v := o.(type) {
	case Requeued:
		return requeued(v)
	case ExpectationMismatch:
		return mismatch(v)
	case NotQuiesced:
		return notQuiesced(v)
	case NotFound:
		return notFound(v)
	}
	panic("requeue: Match called with a nil or unknown outcome")
}
