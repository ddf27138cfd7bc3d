-- +goose Up
-- A job type can be paused: its jobs stay PENDING and no claim leases
-- them until it is resumed; enqueues are still accepted. A column of the
-- definition (a reference table on Citus), so a pause is durable and every
-- worker sees it on its next claim.
ALTER TABLE job_definitions ADD COLUMN is_paused boolean NOT NULL DEFAULT false;

-- +goose Down
ALTER TABLE job_definitions DROP COLUMN is_paused;
