-- ServerIsDistributed reports whether the database runs Citus (the citus
-- extension is installed): the operations over every tenant (the claim,
-- lease recovery) then go tenant by tenant, since Citus takes row locks
-- only in a statement routed to one tenant.
-- name: ServerIsDistributed :one
SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_extension WHERE extname = 'citus') AS distributed;

-- ServerClock reads the database clock (now(): the start of the
-- transaction, or of this statement outside one). Cutoffs given as an age
-- (a prune's OlderThan) are measured against it, never against the
-- process's clock, so a machine whose clock runs ahead cannot delete what
-- just finished.
-- name: ServerClock :one
SELECT now()::timestamptz AS now;
