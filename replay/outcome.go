package replay

import (
	"github.com/google/uuid"

	"github.com/runledger-go/runledger"
)

// Outcome is the result of a replay that did not fail: exactly one of
// Replayed, ExpectationMismatch or NotFound. The set is closed (only this
// package implements Outcome); handle it with Match, which the compiler
// makes cover all three, or with a type switch.
type Outcome interface {
	isOutcome()
}

// Job identifies the replay job and its state when the call returned.
type Job struct {
	JobID uuid.UUID
	// Status and RunNumber are the replay's current values: PENDING at run 1
	// when Inserted; possibly later states (LEASED, SUCCEEDED, a higher run)
	// when Existing. The caller's transaction holds the replay row locked
	// FOR NO KEY UPDATE, so they stay true until it ends.
	Status    runledger.JobStatus
	RunNumber int32
}

// Replayed: the replay exists, created now (Inserted) or by an earlier call
// with the same key and reason (Existing).
type Replayed struct {
	// SourceJobID and SourceRunNumber identify the replayed run. On the
	// Existing path they echo the request; on the Inserted path they come
	// from the locked source row (they are equal).
	SourceJobID     uuid.UUID
	SourceRunNumber int32
	Disposition     runledger.Disposition
	Replay          Job
}

// ExpectationMismatch: the source exists in the caller's scope but is not
// SUCCEEDED at the expected run. Nothing was written or locked.
type ExpectationMismatch struct {
	// Actual is the source as it is now.
	Actual runledger.Job
}

// NotFound: no job with that id exists in the caller's scope (a job in
// another scope is reported the same way). Nothing was written or locked.
type NotFound struct{}

func (Replayed) isOutcome()            {}
func (ExpectationMismatch) isOutcome() {}
func (NotFound) isOutcome()            {}

// Match calls the function for o's kind and returns its result. A nil or
// unknown outcome panics: SucceededJob and SucceededJobTx never return one
// together with a nil error.
func Match[T any](o Outcome, replayed func(Replayed) T, mismatch func(ExpectationMismatch) T, notFound func(NotFound) T) T {
	switch v := o.(type) {
	case Replayed:
		return replayed(v)
	case ExpectationMismatch:
		return mismatch(v)
	case NotFound:
		return notFound(v)
	}
	panic("replay: Match called with a nil or unknown outcome")
}
