-- WorkerListen subscribes the connection to runledger_job_due, on which
-- committed inserts of due jobs notify (their job type as payload): a
-- worker holds one connection for it and waits for notifications there.
-- name: WorkerListen :exec
LISTEN runledger_job_due;

-- WorkerNotifyDue wakes the workers of each of @job_types ('' wakes every
-- worker, for a replay, whose type is its source's): pg_notify on
-- runledger_job_due, delivered when the transaction commits and never if
-- it rolls back. It is a statement of its own, queued beside the insert in
-- the same transaction (an implicit one for a single insert: the batch
-- ends in one Sync), because on Citus a notification sent inside a routed
-- statement is sent on the worker node, where nobody listens; this one
-- touches no table, so the coordinator sends it.
-- name: WorkerNotifyDue :exec
SELECT pg_notify('runledger_job_due', job_type) FROM unnest(@job_types::text[]) AS job_type;
