// Package health reports how the queue is doing and removes old finished
// work: Stats summarizes the live queue and a recent window of finished
// jobs per job type, and Prune deletes finished jobs (with their events,
// lineage rows and claims) that finished before a cutoff, a lineage family
// at a time, in bounded batches that never wait on a row another
// transaction holds.
//
// It is part of the library, beside packages jobs, lease and inspect: it stands on the
// foundations in internal/ and the generated statements in db/, and the
// worker runtime calls Prune on a schedule (worker.Config.Retention).
//
// # Errors
//
// Every error is a *runledger.Error. Requests are validated before any
// database work, so an invalid request fails the same way on a closed pool;
// the validation codes are stable (health.stats_window_invalid,
// health.job_type_invalid, health.prune_cutoff_invalid,
// health.prune_status_invalid, health.prune_batch_invalid).
package health
