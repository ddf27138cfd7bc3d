// Package jobs holds the ledger's writes of jobs: job definitions
// (UpsertDefinition, PauseType, ResumeType, and their reads), enqueue
// (keyed and unkeyed, one at a time or EnqueueMany), workflow steps and
// cancellation. The worker's lease protocol (claim, heartbeat, complete,
// fail, release, recovery) is package lease; the reads of jobs, events and
// lineage are package inspect.
//
// It is part of the library: it stands on the root package and the
// foundations in internal/ (errs, validate, dberr, txn, rows, wake), and
// imports neither the other job packages, nor replay or requeue, nor
// tooling.
//
// # Entry points
//
// Every writing operation comes as a pair. X(ctx, pool, req) owns its work:
// a single statement on the pool when one statement suffices, or a READ
// COMMITTED transaction of its own (committed on success, rolled back on any
// error; a failed COMMIT returns an error matching
// runledger.ErrCommitUnconfirmed). XTx(ctx, tx, req) runs inside the
// caller's pgx.Tx and never commits or rolls back; locks it takes last until
// the caller's transaction ends, and after an error the caller should roll
// back. A context that ends mid-statement cancels the statement on the
// server (aborting the caller's transaction); if the server does not
// confirm the cancel within a grace of 1 s, the caller's connection is
// closed, so that no late cancel reaches its next statement. Reads of
// definitions take a Querier, which a pool, a connection and a transaction
// all satisfy.
//
// # Errors
//
// Every error is a *runledger.Error. Each request type checks itself in
// its Validate method, which every entry point calls before any database
// work (an invalid request fails the same way on a closed pool), with
// category Validation and the job.* codes of the root package. A job
// outside the caller's scope is runledger.CodeJobNotFound, exactly as a
// job that does not exist. Database failures are translated at one edge
// (SQLSTATE and constraint name); retryable ones have category Transient.
//
// # Locks
//
//   - Enqueue reads the job type's definition FOR SHARE, so a definition
//     change waits for transactions that are enqueuing that type. A keyed
//     enqueue that finds an existing job locks it FOR NO KEY UPDATE.
//     EnqueueMany does both for a batch, inserting in (tenant, type, key)
//     order so that batches with overlapping keys never wait in a cycle.
//   - Cancel updates one row (compare-and-set) and locks it until the
//     transaction ends.
//   - PauseType and ResumeType update the definition row.
//
// # Round trips
//
// Owned transactions run on the session engine of internal/txn. A keyed
// enqueue is one round trip for every outcome (BEGIN, the insert, the
// guarded lookup of the key's holder and COMMIT in one pipeline); in a
// caller's transaction two (a SHOW of its isolation and access mode, then
// the insert and the lookup). EnqueueMany is two round trips whatever
// the batch (the inserts; the lookups, events on Citus and COMMIT). An
// unkeyed enqueue and a cancel are one statement each, committing on its
// own when run on the pool. Workflow enqueue runs its statements one by
// one between a BEGIN and a COMMIT of its own.
//
// # Unknown outcomes
//
// A write sent to the server whose reply never came (the connection
// dropped, or ctx ended and the server did not answer the cancel request
// within the engine's grace) may have committed: the error matches
// runledger.ErrCommitUnconfirmed, never a transient error whose retry
// could write twice. Keyed enqueues and enqueues with a chosen JobID are
// safe to repeat; after a lost Cancel, read the job (inspect.Get).
package jobs

import (
	"github.com/runledger-go/runledger/db"
)

// Querier runs the statements of a read. *pgxpool.Pool, *pgx.Conn and
// pgx.Tx satisfy it; a read on a transaction sees that transaction's
// writes.
type Querier = db.DBTX

var queries = db.New()
