// Package jobs implements the job ledger operations around compare-and-replay:
// job definitions, enqueue (keyed and unkeyed), claim with leases,
// completion, failure with retry and dead-lettering, cancellation, expired
// lease recovery, workflow membership, and the reads (jobs, events, lists,
// and GetDetail: a job with its events and replay lineage in one snapshot;
// the lineage reads themselves are package replay's List and Origin).
//
// It is part of the library: it stands on package replay and the
// foundations in internal/ (errs, validate, dberr, txn, rows), and imports
// no tooling.
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
// closed, so that no late cancel reaches its next statement. Reads take a
// Querier, which a pool, a connection and a transaction all satisfy.
//
// # Errors
//
// Every error is a *runledger.Error. Requests are validated before any
// database work (an invalid request fails the same way on a closed pool)
// with category Validation and the job.* codes of the root package. A job
// outside the caller's scope is runledger.CodeJobNotFound, exactly as a job
// that does not exist. Database failures are translated at one edge
// (SQLSTATE and constraint name); retryable ones have category Transient.
//
// # Scope on the worker path
//
// Claim is not scoped: a worker leases due jobs of every tenant. Complete
// and Fail identify a job by its lease (job id, run, attempt and worker
// id, as Claim returned them) and take an optional scope. Without one (a
// nil Scope) whoever presents a job's current lease can finish it,
// whatever its tenant, and a refusal says only whether the job id exists.
// The worker id is not an authority: every reader of a running job sees
// it (the record, its LEASED and PROGRESS events, jobs show), so whoever
// can read a running job's worker id through the library can finish its
// lease. The authority is access to the database, not the id; an
// unguessable id only keeps two workers from taking each other's leases
// by mistake. With a scope, a job outside it is
// runledger.CodeJobNotFound, and a mismatch names the job's status, run
// and attempt. No error ever names the worker holding a job.
//
// # Locks
//
//   - Enqueue reads the job type's definition FOR SHARE, so a definition
//     change waits for transactions that are enqueuing that type. A keyed
//     enqueue that finds an existing job locks it FOR NO KEY UPDATE.
//     EnqueueMany does both for a batch, inserting in (tenant, type, key)
//     order so that batches with overlapping keys never wait in a cycle.
//   - Claim locks due PENDING candidates FOR UPDATE SKIP LOCKED: rows
//     another transaction holds (another claimer, a replay transaction
//     holding its replay job, a keyed enqueue holding an existing job) are
//     passed by, never waited on. Jobs of a paused type (PauseType) are
//     not candidates.
//   - Complete, Fail and Cancel update one row (compare-and-set) and lock it
//     until the transaction ends.
//   - Reads take no locks.
//
// # Round trips
//
// Owned transactions run on the session engine of internal/txn. A keyed
// enqueue is one round trip for every outcome (BEGIN, the insert, the
// guarded lookup of the key's holder and COMMIT in one pipeline); in a
// caller's transaction two (a SHOW of its isolation and access mode, then
// the insert and the lookup). EnqueueMany is two round trips whatever
// the batch (the inserts; the lookups, events on Citus and COMMIT). An
// unkeyed enqueue, a finish and a cancel
// are one statement each, committing on its own when run on the pool.
// Claim, lease recovery and workflow enqueue run their statements one by
// one between a BEGIN and a COMMIT of their own.
//
// # Unknown outcomes
//
// A write sent to the server whose reply never came (the connection
// dropped, or ctx ended and the server did not answer the cancel request
// within the engine's grace) may have committed: the error matches
// runledger.ErrCommitUnconfirmed, never a transient error whose retry
// could write twice. Keyed enqueues and enqueues with a chosen JobID are
// safe to repeat; after a lost Complete, Fail or Cancel, read the job.
package jobs

import (
	"github.com/runledger-go/runledger/db"
)

// Querier runs the statements of a read. *pgxpool.Pool, *pgx.Conn and
// pgx.Tx satisfy it; a read on a transaction sees that transaction's
// writes.
type Querier = db.DBTX

// MaxLimit is the largest page, claim batch or recovery batch any
// operation of this package accepts.
const MaxLimit = 1000

var queries = db.New()
