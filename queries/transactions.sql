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

-- TransactionGetIsolation reports the isolation level of the current
-- transaction ("read committed", "repeatable read", ...). Callers that
-- join a caller's transaction use it to refuse levels their locking
-- protocol is not correct under.
-- name: TransactionGetIsolation :one
SELECT current_setting('transaction_isolation')::text AS isolation;
