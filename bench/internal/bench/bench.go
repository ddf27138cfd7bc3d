// Package bench measures compare-and-replay end to end (the code behind
// the bench command): it seeds a database with succeeded sources, runs
// replay.SucceededJob from N concurrent clients for a fixed time on each
// path (inserted, existing, mismatch, not_found), and reports throughput
// and latency percentiles; optionally it runs the same work from pgbench,
// the reference protocol (one statement per round trip) and this project's
// pipelined protocol, against the same database, and reports the ratios;
// and it runs the anchors a caller passes (another system's comparable
// calls, see Anchor) in the same rotation.
//
// It is tooling: the seeding and the pgbench scripts hold SQL of their own.
// The library's statements run only through package replay.
package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/runledger-go/runledger/internal/pgserver"
	"github.com/runledger-go/runledger/internal/testdb/pgproxy"
)

// Path is one outcome of a replay the bench exercises.
type Path string

// The paths, in report order.
const (
	Inserted Path = "inserted"  // a new key on a seeded source: a replay is created
	Existing Path = "existing"  // the seeded key and reason: an idempotent retry
	Mismatch Path = "mismatch"  // an expected run of 2 on a source at run 1
	NotFound Path = "not_found" // an id past the seeded range
)

// Paths lists every path.
var Paths = []Path{Inserted, Existing, Mismatch, NotFound}

// ParsePath parses a path name.
func ParsePath(s string) (Path, error) {
	for _, p := range Paths {
		if string(p) == s {
			return p, nil
		}
	}
	return "", fmt.Errorf("unknown path %q (want inserted, existing, mismatch or not_found)", s)
}

// Clients that run the work.
const (
	ClientGo               = "go"
	ClientPgbenchReference = "pgbench-reference"
	ClientPgbenchThreeTrip = "pgbench-threetrip"
	ClientPgbenchPipelined = "pgbench-pipelined"
)

// RoundTrips is the protocol's round trips per operation, by client and
// path (with the statement cache warm).
var RoundTrips = map[string]map[Path]int{
	ClientGo:               {Inserted: 1, Existing: 1, Mismatch: 1, NotFound: 1},
	ClientPgbenchPipelined: {Inserted: 1, Existing: 1, Mismatch: 1, NotFound: 1},
	ClientPgbenchThreeTrip: {Inserted: 3, Existing: 2, Mismatch: 3, NotFound: 3},
	ClientPgbenchReference: {Inserted: 9, Existing: 4, Mismatch: 6, NotFound: 6},
}

// Server kinds.
const (
	ServerDurable    = "durable"    // throwaway server, PostgreSQL's durable defaults (fsync on)
	ServerFast       = "fast"       // throwaway server, fsync, synchronous_commit and full_page_writes off
	ServerConfigured = "configured" // the database the caller gave
)

// Options configures Run.
type Options struct {
	// DatabaseURL is the database to run on; it is migrated, and its rows
	// of JobType replaced by the seed. Empty: throwaway servers started
	// for the run (package pgserver), one per entry of Servers.
	DatabaseURL string
	// Servers lists the throwaway servers to run on, ServerDurable and/or
	// ServerFast. Ignored with DatabaseURL.
	Servers []string
	// Sources lists the seed sizes; each gets its own database (a fresh
	// seed of the configured one).
	Sources []int
	// Clients lists the numbers of concurrent clients.
	Clients []int
	// Paths lists the paths to run (default all).
	Paths []Path
	// Duration is how long each measured run lasts (whole seconds);
	// Warmup runs the same load first, unmeasured.
	Duration, Warmup time.Duration
	// CancelableContext makes the Go client pass a cancelable context to
	// every call, as a request handler would (pgx then watches it with a
	// goroutine per round trip); by default the calls' context cannot be
	// canceled.
	CancelableContext bool
	// Rounds repeats every run, rotating the order of the clients (Go,
	// pgbench reference, pgbench pipelined), and reports them together
	// (default 1).
	Rounds int
	// AddedRTT lists the latencies to add to every round trip through a
	// loopback proxy; 0 is a direct connection.
	AddedRTT []time.Duration
	// ComparePgbench also runs the pgbench scripts (package
	// bench/pgbench) after each Go run, with the same clients, paths and
	// duration, against the same database.
	ComparePgbench bool
	// Pgbench is the pgbench binary; empty: next to the server binaries
	// (package pgserver finds them), else on PATH.
	Pgbench string
	// Anchors are other clients run beside the Go client, on the same
	// databases in the same rotation, for comparison (see Anchor).
	Anchors []Anchor
	// Progress receives a progress line while a run goes on, and setup
	// messages; nil discards them. ProgressTTY rewrites the line in place.
	Progress    io.Writer
	ProgressTTY bool
}

// serverSettings are the settings of the throwaway servers besides
// pgserver's durability choice: room for the data set in memory, and no
// checkpoint forced by WAL volume during a run.
var serverSettings = map[string]string{
	"shared_buffers": "1GB",
	"max_wal_size":   "8GB",
	// A timed checkpoint during a run must not recycle the WAL the worker
	// bench then decodes with pg_waldump.
	"wal_keep_size":   "4GB",
	"max_connections": "200",
}

// Run runs the benchmark matrix and returns the report.
func Run(ctx context.Context, opts Options) (*Report, error) {
	if err := opts.normalize(); err != nil {
		return nil, err
	}
	b := &runner{opts: opts, progress: opts.Progress}
	if b.progress == nil {
		b.progress = io.Discard
	}
	rep := &Report{Machine: Machine{CPU: cpuModel(), Cores: runtime.NumCPU(), GoVersion: runtime.Version()}}
	rep.Settings = Settings{Sources: opts.Sources, Clients: opts.Clients, Duration: opts.Duration.String(),
		Warmup: opts.Warmup.String(), Rounds: opts.Rounds, Pgbench: opts.ComparePgbench,
		CancelableContext: opts.CancelableContext}
	for _, a := range opts.Anchors {
		rep.Settings.Anchors = append(rep.Settings.Anchors, a.Name())
	}
	for _, d := range opts.AddedRTT {
		rep.Settings.AddedRTT = append(rep.Settings.AddedRTT, d.String())
	}
	if opts.DatabaseURL != "" {
		rep.Settings.Servers = []string{ServerConfigured}
		if err := b.onServer(ctx, rep, ServerConfigured, nil); err != nil {
			return rep, err
		}
		return rep, nil
	}
	rep.Settings.Servers = opts.Servers
	binDir, err := pgserver.FindBinDir("")
	if err != nil {
		return rep, err
	}
	b.binDir = binDir
	for _, kind := range opts.Servers {
		b.logf("starting a throwaway %s PostgreSQL server", kind)
		srv, err := pgserver.Start(ctx, pgserver.Options{BinDir: binDir, Durable: kind == ServerDurable, Settings: serverSettings})
		if err != nil {
			return rep, err
		}
		err = b.onServer(ctx, rep, kind, srv)
		if stopErr := srv.Stop(); err == nil && stopErr != nil {
			err = stopErr
		}
		if err != nil {
			return rep, err
		}
	}
	return rep, nil
}

func (o *Options) normalize() error {
	if len(o.Servers) == 0 {
		o.Servers = []string{ServerDurable, ServerFast}
	}
	for _, s := range o.Servers {
		if s != ServerDurable && s != ServerFast {
			return fmt.Errorf("bench: unknown server kind %q", s)
		}
	}
	if len(o.Sources) == 0 {
		o.Sources = []int{10_000}
	}
	for _, n := range o.Sources {
		if n < 1 {
			return errors.New("bench: --sources must be positive")
		}
	}
	if len(o.Clients) == 0 {
		o.Clients = []int{1, 16}
	}
	for _, c := range o.Clients {
		if c < 1 || c > 150 {
			return errors.New("bench: --clients must be between 1 and 150")
		}
	}
	if len(o.Paths) == 0 {
		o.Paths = Paths
	}
	if o.Duration <= 0 {
		o.Duration = 5 * time.Second
	}
	o.Duration = o.Duration.Round(time.Second)
	if o.Duration < time.Second {
		o.Duration = time.Second
	}
	if o.Warmup < 0 {
		return errors.New("bench: --warmup must not be negative")
	}
	o.Warmup = o.Warmup.Round(time.Second)
	if o.Rounds < 1 {
		o.Rounds = 1
	}
	if len(o.AddedRTT) == 0 {
		o.AddedRTT = []time.Duration{0}
	}
	for _, d := range o.AddedRTT {
		if d < 0 || d > time.Second {
			return errors.New("bench: --added-rtt must be between 0 and 1s")
		}
	}
	return nil
}

type runner struct {
	opts     Options
	progress io.Writer
	binDir   string
	pgbench  string
	scripts  string // directory holding the pgbench scripts
	proxy    *pgproxy.Proxy
}

func (b *runner) logf(format string, args ...any) {
	if b.opts.ProgressTTY {
		fmt.Fprint(b.progress, "\r\033[K")
	}
	fmt.Fprintf(b.progress, "bench: "+format+"\n", args...)
}

// onServer runs the matrix on one server (srv nil: the configured
// database).
func (b *runner) onServer(ctx context.Context, rep *Report, kind string, srv *pgserver.Server) error {
	if b.opts.ComparePgbench && b.pgbench == "" {
		bin, version, err := findPgbench(b.opts.Pgbench, b.binDir)
		if err != nil {
			return err
		}
		b.pgbench, rep.Machine.Pgbench = bin, version
		dir, err := writeScripts()
		if err != nil {
			return err
		}
		b.scripts = dir
		defer func() { _ = os.RemoveAll(dir); b.scripts = ""; b.pgbench = "" }()
	}
	if srv == nil {
		// One database: each seed size in turn.
		for _, n := range b.opts.Sources {
			b.logf("configured database: seeding %d sources", n)
			if err := prepare(ctx, b.opts.DatabaseURL, n, b.logf); err != nil {
				return err
			}
			if err := b.prepareAnchors(ctx, b.opts.DatabaseURL, n); err != nil {
				return err
			}
			if err := b.onDatabases(ctx, rep, kind, []seeded{{n, b.opts.DatabaseURL}}); err != nil {
				return err
			}
		}
		return nil
	}
	// A database per seed size, all seeded first, so that the runs of the
	// sizes can alternate.
	var dbs []seeded
	for _, n := range b.opts.Sources {
		name := fmt.Sprintf("runledger_bench_%d", n)
		if err := createDatabase(ctx, srv.URL("postgres"), name); err != nil {
			return err
		}
		dbURL := srv.URL(name)
		b.logf("%s server: seeding %d sources", kind, n)
		if err := prepare(ctx, dbURL, n, b.logf); err != nil {
			return err
		}
		if err := b.prepareAnchors(ctx, dbURL, n); err != nil {
			return err
		}
		dbs = append(dbs, seeded{n, dbURL})
	}
	return b.onDatabases(ctx, rep, kind, dbs)
}

// seeded is a database seeded with n sources.
type seeded struct {
	n   int
	url string
}

// onDatabases runs the matrix on each network.
func (b *runner) onDatabases(ctx context.Context, rep *Report, kind string, dbs []seeded) error {
	if rep.Machine.PostgreSQL == "" {
		rep.Machine.PostgreSQL = serverVersion(ctx, dbs[0].url)
	}
	for _, nt := range b.networks() {
		targets := make([]seeded, len(dbs))
		copy(targets, dbs)
		var proxy *pgproxy.Proxy
		if nt.proxied {
			addr, err := pgproxy.TargetAddr(dbs[0].url)
			if err != nil {
				return fmt.Errorf("bench: --added-rtt: %w", err)
			}
			if proxy, err = pgproxy.Start(addr, pgproxy.Options{Delay: nt.rtt}); err != nil {
				return err
			}
			for i := range targets {
				targets[i].url = proxy.ConnString(targets[i].url)
			}
		}
		b.proxy = proxy
		err := b.matrix(ctx, rep, kind, targets, nt)
		if proxy != nil {
			proxy.Close()
		}
		b.proxy = nil
		if err != nil {
			return err
		}
	}
	return nil
}

// network is how the clients reach the server: directly, or through the
// delay proxy with a delay (zero for the proxied baseline).
type network struct {
	rtt     time.Duration
	proxied bool
}

// networks lists the networks to run on: each --added-rtt value, 0 being
// direct; when some are not 0, a proxied run with no delay comes first,
// the baseline that isolates the added latency from the proxy's own hops.
func (b *runner) networks() []network {
	var out []network
	delayed := false
	for _, d := range b.opts.AddedRTT {
		if d > 0 {
			delayed = true
		}
	}
	for _, d := range b.opts.AddedRTT {
		if d == 0 {
			out = append(out, network{})
		}
	}
	if delayed {
		out = append(out, network{proxied: true})
	}
	for _, d := range b.opts.AddedRTT {
		if d > 0 {
			out = append(out, network{rtt: d, proxied: true})
		}
	}
	return out
}

func (b *runner) matrix(ctx context.Context, rep *Report, kind string, dbs []seeded, nt network) error {
	clientsOrder := []string{ClientGo}
	if b.opts.ComparePgbench {
		clientsOrder = append(clientsOrder, ClientPgbenchReference, ClientPgbenchThreeTrip, ClientPgbenchPipelined)
	}
	anchors := map[string]Anchor{}
	for _, a := range b.opts.Anchors {
		anchors[a.Name()] = a
		clientsOrder = append(clientsOrder, a.Name())
	}
	type cell struct {
		n      int
		client string
	}
	for _, clients := range b.opts.Clients {
		for _, path := range b.opts.Paths {
			acc := map[cell]*accum{}
			// Rounds rotate the order of the clients and of the seed
			// sizes, so that a slow stretch of a noisy machine does not
			// fall on one of them.
			for r := 0; r < b.opts.Rounds; r++ {
				for d := range dbs {
					db := dbs[(d+r)%len(dbs)]
					base := Result{Server: kind, Sources: db.n, AddedRTT: nt.rtt.String(), addedRTT: nt.rtt, Proxied: nt.proxied, Path: path, Clients: clients}
					for j := range clientsOrder {
						client := clientsOrder[(j+r)%len(clientsOrder)]
						var (
							res Result
							lat []time.Duration
							err error
						)
						switch a := anchors[client]; {
						case a != nil:
							var ran bool
							res, lat, ran, err = b.runAnchor(ctx, a, db.url, base)
							if err == nil && !ran {
								continue
							}
						case client == ClientGo:
							res, lat, err = b.runGo(ctx, db.url, base)
						default:
							res, lat, err = b.runPgbench(ctx, db.url, base, strings.TrimPrefix(client, "pgbench-"))
						}
						if err != nil {
							return err
						}
						k := cell{db.n, client}
						if acc[k] == nil {
							acc[k] = &accum{res: res}
						}
						acc[k].add(res, lat)
					}
				}
			}
			for _, db := range dbs {
				for _, client := range clientsOrder {
					if a := acc[cell{db.n, client}]; a != nil {
						rep.Results = append(rep.Results, a.result())
					}
				}
			}
		}
	}
	return nil
}

func createDatabase(ctx context.Context, adminURL, name string) error {
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()); err != nil {
		return err
	}
	_, err = conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
	return err
}

func serverVersion(ctx context.Context, url string) string {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return ""
	}
	defer conn.Close(context.Background())
	var v string
	_ = conn.QueryRow(ctx, "SHOW server_version").Scan(&v)
	return "PostgreSQL " + v
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func cpuModel() string {
	data, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return runtime.GOARCH
	}
	for _, line := range strings.Split(string(data), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return runtime.GOARCH
}
