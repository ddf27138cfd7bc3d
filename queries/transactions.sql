-- TransactionBeginReadCommitted starts a READ COMMITTED transaction,
-- overriding any session default (default_transaction_isolation). It is for
-- operations that run their own transaction by hand on a pooled connection,
-- so that BEGIN can travel in one round trip with the first statement (a
-- pgx batch: the statements still run one after another on the server, and
-- an error skips the rest). pgx's Tx sends the same statement itself.
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
