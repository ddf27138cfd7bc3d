// Package lease is the worker's side of the ledger: Claim leases due jobs,
// Heartbeat renews a lease and records progress, Complete and Fail end an
// attempt (Fail retrying with Backoff or dead-lettering), Release hands a
// job back without spending the attempt, and RecoverExpiredLeases returns
// jobs whose lease ran out. Every write after Claim is fenced by the lease
// it presents (job id, run, attempt and worker id).
//
// It is part of the library: it stands on the root package and the
// foundations in internal/ (errs, validate, dberr, txn, rows, wake), and
// imports neither the other job packages nor tooling.
//
// # Entry points
//
// Every operation comes as a pair. X(ctx, pool, req) owns its work: a
// single statement on the pool when one statement suffices, or a READ
// COMMITTED transaction of its own (a failed COMMIT returns an error
// matching runledger.ErrCommitUnconfirmed). XTx(ctx, tx, req) runs inside
// the caller's pgx.Tx and never commits or rolls back. The batch forms
// (CompleteMany, FailMany, HeartbeatMany, Release) return one Result per
// request, in input order: one request's refusal does not refuse the
// others.
//
// # Scope
//
// Claim is not scoped: a worker leases due jobs of every tenant. Complete,
// Fail, Heartbeat and Release identify a job by its lease and take an
// optional scope. Without one (a nil Scope) whoever presents a job's
// current lease can finish it, whatever its tenant, and a refusal says
// only whether the job id exists. The worker id is not an authority:
// every reader of a running job sees it, so the authority is access to
// the database; an unguessable id only keeps two workers from taking each
// other's leases by mistake. With a scope, a job outside it is
// runledger.CodeJobNotFound, and a mismatch names the job's status, run
// and attempt. No error ever names the worker holding a job.
//
// # Locks
//
//   - Claim locks due PENDING candidates FOR UPDATE SKIP LOCKED: rows
//     another transaction holds (another claimer, a replay transaction
//     holding its replay job, a keyed enqueue holding an existing job) are
//     passed by, never waited on. Jobs of a paused type are not
//     candidates.
//   - Complete, Fail, Heartbeat and Release update the leased rows
//     (compare-and-set), in job id order, and lock them until the
//     transaction ends.
//   - RecoverExpiredLeases runs under a transaction-level advisory lock
//     (RecoveryLockKey), so one recovery runs at a time.
//
// # Unknown outcomes
//
// A write sent to the server whose reply never came may have committed:
// the error matches runledger.ErrCommitUnconfirmed. After a lost
// Complete, Fail or Heartbeat, read the job (package inspect).
package lease

import (
	"github.com/runledger-go/runledger/db"
)

var queries = db.New()
