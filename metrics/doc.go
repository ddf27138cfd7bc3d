// Package metrics offers the ledger's Prometheus collectors to an
// application's own registry: the queue's gauges read from health.GetStats
// (StatsCollector, cached so that scrapes cost the database at most one
// Stats statement per interval) and the worker's counters and histograms
// (WorkerCollector, fed from worker.Config.OnFinished). The console's
// /metrics serves the same collectors.
//
// The series:
//
//	runledger_jobs{type,status}              PENDING due ("pending_due"), PENDING scheduled ("pending_scheduled"), LEASED ("leased")
//	runledger_oldest_due_seconds{type}       age of the oldest due PENDING job (0 without one)
//	runledger_expired_leases{type}           LEASED jobs whose lease ran out, not yet recovered
//	runledger_jobs_finished_total{type,outcome}  attempts finished, by worker.Outcome
//	runledger_job_duration_seconds{type}     handler run time of each attempt
//	runledger_job_pickup_seconds{type}       from due to start, for attempts that ended the job
//
// A package above the library (nothing below imports it).
package metrics
