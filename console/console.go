// Package console is the ledger's operator console: an http.Handler with
// server-rendered pages over the library's reads (an overview from Stats,
// the job list, the job page with its history and lineage) and its
// compare-and-set actions (replay, requeue, cancel, and bulk replay and
// requeue over every job matching a filter), plus /healthz and /metrics.
//
// Mount it under a prefix of an application's mux, behind the
// application's own authentication (Options.Operator), or serve it with a
// login token (Options.Token; `runledger ui` does). See docs/CONSOLE.md.
//
// A floor above jobs, replay, requeue and health: nothing below imports it.
package console

import (
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/internal/validate"
	"github.com/runledger-go/runledger/metrics"
)

// Options configures the console. Exactly how requests are authenticated
// is the caller's choice: Operator, Token, or both (Operator is asked
// first). New refuses options with neither.
type Options struct {
	// Prefix is the path the console is mounted under ("/ops"), without a
	// trailing slash; "" for the root. The console builds its links and
	// its cookie's path from it, and expects the prefix already stripped:
	//
	//	mux.Handle("/ops/", http.StripPrefix("/ops", h))
	Prefix string
	// Operator authenticates a request with the application's own check
	// (its session, its SSO header): it returns the operator's name,
	// recorded with every action, or false to refuse the request.
	Operator func(*http.Request) (name string, ok bool)
	// Token, when not "", lets a request in that presents it: once, on
	// /login?token=TOKEN, which sets an HttpOnly, SameSite=Strict cookie,
	// or on every request as "Authorization: Bearer TOKEN". Its actions
	// are recorded as the operator "token". Use a long random value
	// (NewToken).
	Token string
	// Scope, when set, limits every page and action to one tenant: another
	// tenant's job is 404. nil shows every tenant, with an Organization
	// filter on the job list.
	Scope *runledger.Scope
	// ReadOnly refuses every action on the server (403) and shows no
	// action buttons.
	ReadOnly bool
	// StatsInterval is how long one Stats read serves the overview and
	// /metrics (default metrics.DefaultStatsInterval).
	StatsInterval time.Duration
	// Collectors are served on /metrics beside the Stats gauges: a
	// metrics.WorkerCollector when a worker runs in the process.
	Collectors []prometheus.Collector
	// BulkChunk is the number of jobs per transaction of a bulk action
	// (default the library's, 1000).
	BulkChunk int
	// Logger receives errors the pages do not show (default
	// slog.Default()).
	Logger *slog.Logger
}

// PageSize is the number of jobs a page of the job list shows.
const PageSize = 50

// console serves the routes; every field is set by New and read-only
// afterwards, except the bulk runs, which guard themselves.
type console struct {
	pool    *pgxpool.Pool
	opts    Options
	log     *slog.Logger
	stats   *metrics.StatsCollector
	metrics http.Handler
	pages   *pages
	runs    *runs
	session string // the cookie value a token login sets; "" without a token
}

// New returns the console's handler over pool. It fails when the options
// authenticate nobody (neither Operator nor Token), when the scope is
// invalid, when the prefix does not start with "/" or ends with one, or
// when a collector cannot be registered.
func New(pool *pgxpool.Pool, opts Options) (http.Handler, error) {
	if pool == nil {
		return nil, errors.New("console: nil pool")
	}
	if opts.Operator == nil && opts.Token == "" {
		return nil, errors.New("console: no authentication: set Options.Operator or Options.Token")
	}
	if opts.Prefix != "" && (!strings.HasPrefix(opts.Prefix, "/") || strings.HasSuffix(opts.Prefix, "/")) {
		return nil, errors.New(`console: Prefix must start with "/" and not end with one`)
	}
	if opts.Scope != nil {
		if err := validate.Scope(*opts.Scope); err != nil {
			return nil, err
		}
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	c := &console{pool: pool, opts: opts, log: opts.Logger, runs: newRuns()}
	if opts.Token != "" {
		c.session = sessionValue(opts.Token)
	}
	c.stats = metrics.NewStatsCollector(pool, metrics.StatsOptions{Scope: opts.Scope, Interval: opts.StatsInterval})
	var err error
	if c.metrics, err = metricsHandler(c.stats, opts.Collectors); err != nil {
		return nil, err
	}
	if c.pages, err = loadPages(); err != nil {
		return nil, err
	}
	return c.routes(), nil
}

// routes is the console's mux, wrapped in the security headers and the
// cross-origin protection that every route shares.
func (c *console) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", healthz)
	mux.Handle("GET /static/", http.StripPrefix("/static/", staticFiles()))
	mux.HandleFunc("GET /login", c.login)

	mux.Handle("GET /{$}", c.page(c.overview))
	mux.Handle("GET /jobs", c.page(c.jobList))
	mux.Handle("GET /jobs/{id}", c.page(c.jobPage))
	mux.Handle("GET /bulk/{kind}", c.page(c.bulkForm))
	mux.Handle("GET /bulk/runs/{run}", c.page(c.bulkRunPage))
	mux.Handle("GET /api/bulk/runs/{run}", c.api(c.bulkRunJSON))
	mux.Handle("GET /metrics", c.api(c.metrics.ServeHTTP))

	mux.Handle("POST /jobs/{id}/replay", c.action(c.replayAction))
	mux.Handle("POST /jobs/{id}/requeue", c.action(c.requeueAction))
	mux.Handle("POST /jobs/{id}/cancel", c.action(c.cancelAction))
	mux.Handle("POST /bulk/{kind}", c.action(c.bulkAction))
	mux.Handle("POST /types/{type}/{change}", c.action(c.typeAction))

	return secure(http.NewCrossOriginProtection().Handler(mux))
}

// healthz answers 200 "ok" to anyone: it says the process serves, and
// nothing about the data.
func healthz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = w.Write([]byte("ok\n"))
}

// link is path under the console's prefix.
func (c *console) link(path string) string { return c.opts.Prefix + path }
