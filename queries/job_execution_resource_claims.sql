-- JobResourceClaimAcquire takes the execution resource claims for claim
-- candidates that carry a key (one candidate per key, the first in claim
-- order), for the attempt the lease is about to start. A key held by a live
-- claim stays with its holder (ON CONFLICT waits for an uncommitted
-- competitor, then does nothing); a claim whose delayed release is due is
-- taken over. Returns the jobs that got their claim.
-- name: JobResourceClaimAcquire :many
INSERT INTO job_execution_resource_claims AS c (
    resource_key, job_id, run_number, attempt, worker_id, lease_expires_at
)
SELECT DISTINCT ON (jq.execution_resource_key)
       jq.execution_resource_key, jq.id, jq.run_number, jq.attempt + 1, @worker_id::text,
       now() + make_interval(secs => @lease_seconds::float8)
FROM job_queue jq
WHERE jq.id = ANY(@job_ids::uuid[])
  AND jq.execution_resource_key IS NOT NULL
ORDER BY jq.execution_resource_key, jq.priority DESC, jq.next_run_at, jq.created_at
ON CONFLICT (resource_key) DO UPDATE
SET job_id = EXCLUDED.job_id,
    run_number = EXCLUDED.run_number,
    attempt = EXCLUDED.attempt,
    worker_id = EXCLUDED.worker_id,
    lease_expires_at = EXCLUDED.lease_expires_at,
    release_after = NULL,
    acquired_at = now()
WHERE c.release_after IS NOT NULL
  AND c.release_after <= now()
RETURNING c.job_id;

-- JobResourceClaimDeleteReleased deletes claims whose delayed release (set
-- when a job was canceled during a live lease) is due.
-- name: JobResourceClaimDeleteReleased :execrows
DELETE FROM job_execution_resource_claims
WHERE release_after IS NOT NULL
  AND release_after <= now();
