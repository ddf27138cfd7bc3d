-- WorkerListen subscribes the connection to runledger_job_due, on which
-- committed inserts of due jobs notify (their job type as payload): a
-- worker holds one connection for it and waits for notifications there.
-- name: WorkerListen :exec
LISTEN runledger_job_due;
