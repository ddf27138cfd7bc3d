-- JobResourceClaimDeleteReleased deletes claims of every tenant whose
-- delayed release (set when a job was canceled during a live lease) is
-- due (on Citus: every shard).
-- name: JobResourceClaimDeleteReleased :execrows
DELETE FROM job_execution_resource_claims
WHERE release_after IS NOT NULL
  AND release_after <= now();
