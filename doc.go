// Package runledger holds the domain types of the runledger job ledger:
// scopes, job records, statuses and stages, and the error model shared by
// every package. It contains no database code; package replay
// (compare-and-replay of a succeeded job) and package jobs (definitions,
// enqueue, claim, complete, fail, cancel and reads) do the work, on
// PostgreSQL through pgx.
//
// Errors returned by those packages are *Error values with a stable Code
// and a Category; match them with errors.Is against the sentinels of this
// package (ErrReplayIdempotencyConflict, ErrCommitUnconfirmed, ...) or with
// errors.As to read the fields.
package runledger
