package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/runledger-go/runledger/worker"
)

// WorkerCollector holds the worker's counters and histograms. Plug its
// OnFinished into worker.Config.OnFinished (or call it from your own
// hook) and register the collector with a registry.
type WorkerCollector struct {
	finished *prometheus.CounterVec
	duration *prometheus.HistogramVec
	pickup   *prometheus.HistogramVec
}

// NewWorkerCollector returns a collector with no observations.
func NewWorkerCollector() *WorkerCollector {
	return &WorkerCollector{
		finished: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "runledger_jobs_finished_total",
			Help: "Attempts a worker in this process finished, by job type and outcome (succeeded, retried, dead_lettered, lost).",
		}, []string{"type", "outcome"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "runledger_job_duration_seconds",
			Help:    "How long each attempt's handler ran, by job type.",
			Buckets: prometheus.ExponentialBuckets(0.005, 4, 10),
		}, []string{"type"}),
		pickup: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "runledger_job_pickup_seconds",
			Help:    "From when a job was due to when its attempt started, for attempts that succeeded or dead-lettered the job, by job type.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 10),
		}, []string{"type"}),
	}
}

// OnFinished records one finished attempt: its outcome, its run time and,
// when the stored job still holds the time it was due (a succeeded or
// dead-lettered job; a retried one is due again later), its pickup delay.
// Cheap and non-blocking, as Config.OnFinished must be.
func (w *WorkerCollector) OnFinished(f worker.Finished) {
	t := f.Job.JobType
	w.finished.WithLabelValues(t, string(f.Outcome)).Inc()
	w.duration.WithLabelValues(t).Observe(f.Duration.Seconds())
	if (f.Outcome == worker.OutcomeSucceeded || f.Outcome == worker.OutcomeDeadLettered) && f.Job.StartedAt != nil {
		if d := f.Job.StartedAt.Sub(f.Job.NextRunAt); d >= 0 {
			w.pickup.WithLabelValues(t).Observe(d.Seconds())
		}
	}
}

// Describe sends the descriptions of the three series.
func (w *WorkerCollector) Describe(ch chan<- *prometheus.Desc) {
	w.finished.Describe(ch)
	w.duration.Describe(ch)
	w.pickup.Describe(ch)
}

// Collect sends the series' current values.
func (w *WorkerCollector) Collect(ch chan<- prometheus.Metric) {
	w.finished.Collect(ch)
	w.duration.Collect(ch)
	w.pickup.Collect(ch)
}
