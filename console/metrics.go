package console

import (
	"fmt"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/runledger-go/runledger/metrics"
)

// metricsHandler serves the Stats gauges and the extra collectors in the
// Prometheus text format, from a registry of the console's own (so an
// application's default registry is left alone).
func metricsHandler(stats *metrics.StatsCollector, extra []prometheus.Collector) (http.Handler, error) {
	reg := prometheus.NewRegistry()
	for _, c := range append([]prometheus.Collector{stats}, extra...) {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("console: register a metrics collector: %w", err)
		}
	}
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), nil
}
