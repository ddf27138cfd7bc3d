-- ServerIsDistributed reports whether the database runs Citus (the citus
-- extension is installed): the operations over every tenant (the claim,
-- lease recovery) then go tenant by tenant, since Citus takes row locks
-- only in a statement routed to one tenant.
-- name: ServerIsDistributed :one
SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_extension WHERE extname = 'citus') AS distributed;
