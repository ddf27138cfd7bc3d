// Package runledger holds the domain types of the runledger job ledger:
// scopes, job records, statuses and stages, and the error model shared by
// every package. It contains no database code; package replay
// (compare-and-replay of a succeeded job), package requeue, package jobs
// (definitions, enqueue, cancel), package lease (claim, heartbeat,
// complete, fail, release, recovery) and package inspect (the reads) do
// the work, on PostgreSQL through pgx.
//
// Errors returned by those packages are *Error values with a stable Code
// and a Category. A Code is itself an error: match one with
// errors.Is(err, CodeJobNotFound) or errors.Is(err, ErrCommitUnconfirmed),
// a code this package does not name with errors.Is(err,
// Code("job.payload_invalid")), and anything else by CategoryOf or
// IsTransient. Error() carries the message, code, detail and cause, and
// *Error implements slog.LogValuer.
//
// The module has three floors. The library is this package, db, replay,
// jobs, goose and schema. Its foundations live in internal/ (errs,
// validate, dberr, txn, rows, failpoint) and import only this package, db
// and each other. Tooling stands on the library: the test kit under
// internal/testdb and the command line under cmd/runledger (its bench in
// cmd/runledger/internal); nothing in the library or its foundations
// imports it.
package runledger
