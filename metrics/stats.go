package metrics

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/health"
)

// DefaultStatsInterval is how long StatsCollector serves one Stats read
// when StatsOptions sets no interval.
const DefaultStatsInterval = 5 * time.Second

// The status label values of runledger_jobs.
const (
	StatusPendingDue       = "pending_due"
	StatusPendingScheduled = "pending_scheduled"
	StatusLeased           = "leased"
)

// StatsOptions configures a StatsCollector.
type StatsOptions struct {
	// Scope limits the gauges to one tenant; nil reports every tenant.
	Scope *runledger.Scope
	// Interval is how long one Stats read answers scrapes (default
	// DefaultStatsInterval): however often Prometheus scrapes, the
	// database sees at most one Stats statement per interval.
	Interval time.Duration
	// Timeout bounds one Stats read (default 5 seconds); a scrape during
	// a failed read reports the error, and the next scrape tries again.
	Timeout time.Duration
}

// StatsCollector is a prometheus.Collector of the queue's gauges, read
// with health.GetStats (the default one-hour window; only the live
// counts are exported). Concurrent scrapes share one read. Register it
// once per registry.
type StatsCollector struct {
	q    health.Querier
	opts StatsOptions

	jobs, oldestDue, expired *prometheus.Desc

	mu    sync.Mutex
	read  time.Time // when stats was read; zero before the first read
	stats health.Stats
}

// NewStatsCollector returns a collector reading Stats on q (a pool).
func NewStatsCollector(q health.Querier, opts StatsOptions) *StatsCollector {
	if opts.Interval <= 0 {
		opts.Interval = DefaultStatsInterval
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 5 * time.Second
	}
	return &StatsCollector{
		q: q, opts: opts,
		jobs: prometheus.NewDesc("runledger_jobs",
			"Live jobs by type and status (pending_due, pending_scheduled, leased), exact at the last Stats read.",
			[]string{"type", "status"}, nil),
		oldestDue: prometheus.NewDesc("runledger_oldest_due_seconds",
			"Seconds the oldest due PENDING job of the type has waited (0 without one): the queue lag.",
			[]string{"type"}, nil),
		expired: prometheus.NewDesc("runledger_expired_leases",
			"LEASED jobs of the type whose lease ran out and that no recovery has taken back yet.",
			[]string{"type"}, nil),
	}
}

// Describe sends the three gauges' descriptions.
func (c *StatsCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.jobs
	ch <- c.oldestDue
	ch <- c.expired
}

// Collect sends the gauges of the cached Stats, reading them again first
// when the cache is older than the interval. A failed read is reported as
// an invalid metric (the scrape fails) and is not cached.
func (c *StatsCollector) Collect(ch chan<- prometheus.Metric) {
	st, err := c.Stats(context.Background())
	if err != nil {
		ch <- prometheus.NewInvalidMetric(c.jobs, err)
		return
	}
	for _, t := range st.Types {
		ch <- prometheus.MustNewConstMetric(c.jobs, prometheus.GaugeValue, float64(t.PendingDue), t.JobType, StatusPendingDue)
		ch <- prometheus.MustNewConstMetric(c.jobs, prometheus.GaugeValue, float64(t.PendingScheduled), t.JobType, StatusPendingScheduled)
		ch <- prometheus.MustNewConstMetric(c.jobs, prometheus.GaugeValue, float64(t.Leased), t.JobType, StatusLeased)
		age := 0.0
		if t.OldestDueAge != nil {
			age = t.OldestDueAge.Seconds()
		}
		ch <- prometheus.MustNewConstMetric(c.oldestDue, prometheus.GaugeValue, age, t.JobType)
		ch <- prometheus.MustNewConstMetric(c.expired, prometheus.GaugeValue, float64(t.ExpiredLeases), t.JobType)
	}
}

// Stats returns the cached Stats, read again when older than the
// interval. Callers arriving during a read wait for it and share it.
func (c *StatsCollector) Stats(ctx context.Context) (health.Stats, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.read.IsZero() && time.Since(c.read) < c.opts.Interval {
		return c.stats, nil
	}
	ctx, cancel := context.WithTimeout(ctx, c.opts.Timeout)
	defer cancel()
	st, err := health.GetStats(ctx, c.q, health.StatsRequest{Scope: c.opts.Scope})
	if err != nil {
		return health.Stats{}, err
	}
	c.stats, c.read = st, time.Now()
	return st, nil
}
