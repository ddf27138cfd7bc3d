-- +goose Up
-- Lineage of compare-and-replay: one row per replay job, keyed for
-- idempotency by (source, source run, caller-chosen request key).

CREATE TABLE job_replays (
    replay_job_id      uuid        PRIMARY KEY,
    source_job_id      uuid        NOT NULL,
    source_run_number  integer     NOT NULL,
    replay_request_key text        NOT NULL,
    reason             text        NOT NULL,
    created_at         timestamptz NOT NULL DEFAULT now(),
    -- Deleting a source takes its lineage with it.
    CONSTRAINT fk_job_replays_source_job FOREIGN KEY (source_job_id)
        REFERENCES job_queue (id) ON DELETE CASCADE,
    -- NO ACTION, not RESTRICT: checked at the end of the statement, so one
    -- DELETE of both source and replay succeeds (the cascade removes the
    -- lineage first) while deleting only the replay is refused, keeping the
    -- idempotency guard for as long as the source exists.
    CONSTRAINT fk_job_replays_replay_job FOREIGN KEY (replay_job_id)
        REFERENCES job_queue (id) ON DELETE NO ACTION,
    -- The idempotency key; its index also serves lookups by source.
    CONSTRAINT uq_job_replays_source_request
        UNIQUE (source_job_id, source_run_number, replay_request_key),
    CONSTRAINT chk_job_replays_distinct_jobs CHECK (source_job_id <> replay_job_id),
    CONSTRAINT chk_job_replays_source_run_positive CHECK (source_run_number > 0),
    CONSTRAINT chk_job_replays_request_key CHECK (
        length(trim(replay_request_key)) > 0 AND octet_length(replay_request_key) <= 512
    ),
    CONSTRAINT chk_job_replays_reason_not_blank CHECK (length(trim(reason)) > 0)
);

-- +goose Down
-- Drops the lineage only; the source and replay jobs stay.
DROP TABLE job_replays;
