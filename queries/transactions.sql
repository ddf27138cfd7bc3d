-- TransactionBeginReadCommitted starts a READ COMMITTED transaction,
-- whatever default_transaction_isolation says, so that an owned session
-- can send BEGIN in one batch with its first statements (which still run
-- one after another; an error skips the rest).
-- name: TransactionBeginReadCommitted :exec
BEGIN ISOLATION LEVEL READ COMMITTED;

-- TransactionCommit commits a transaction begun with
-- TransactionBeginReadCommitted, possibly in one batch with the last
-- statement. Its command tag is ROLLBACK instead of COMMIT when the
-- transaction had already failed, so callers check it.
-- name: TransactionCommit :execresult
COMMIT;

-- TransactionRollback rolls back a transaction begun with
-- TransactionBeginReadCommitted.
-- name: TransactionRollback :exec
ROLLBACK;

-- TransactionShowIsolation reports the isolation level of the current
-- transaction with SHOW, which (unlike a SELECT) takes no snapshot: a
-- caller's SERIALIZABLE READ ONLY DEFERRABLE transaction does not wait for
-- a safe snapshot to be refused.
-- name: TransactionShowIsolation :one
SHOW transaction_isolation;

-- TransactionShowReadOnly reports, with SHOW (no snapshot), whether the
-- current transaction is read-only ("on" or "off").
-- name: TransactionShowReadOnly :one
SHOW transaction_read_only;

-- TransactionTryRecoveryLock takes the lease recovery's advisory lock
-- @lock_key for the rest of the transaction, without waiting: false when
-- another recovery holds it. (On Citus the lock is the coordinator's.)
-- name: TransactionTryRecoveryLock :one
SELECT pg_try_advisory_xact_lock(@lock_key::bigint) AS acquired;
