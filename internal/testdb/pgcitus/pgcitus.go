// Package pgcitus runs a throwaway Citus cluster on loopback for tests: one
// coordinator and (by default) two workers, each a throwaway server started
// by package pgserver, with the citus extension created in every node's
// maintenance database and the workers registered on the coordinator. It is
// tooling: no library package imports it.
//
// The servers need binaries that can load citus; tools/citus builds them
// and prints their bin directory, for Options.BinDir or RUNLEDGER_PG_BINDIR:
//
//	RUNLEDGER_PG_BINDIR=$(tools/citus) go test ./internal/testdb/pgcitus/
//
// # Databases
//
// Citus keeps its metadata (nodes, distributed tables, shards, placements)
// per database, and a distributed database is a database of the same name on
// every node: the coordinator's tables route to shard tables in the workers'
// databases of that name. CREATE DATABASE is not propagated, so every
// database function here acts on all nodes.
//
// CreateDatabase makes one from nothing: the database on every node, the
// extension in each, the coordinator and the workers registered in the
// coordinator's (Citus then copies the metadata to the workers). That costs
// about a second. A database cloned from a template is much cheaper and
// just as correct: CloneDatabase runs CREATE DATABASE ... TEMPLATE on every
// node at once, and since each node's copy carries that node's own catalog
// (the coordinator's metadata, each worker's metadata and shards), the
// clones form a distributed database of their own, under the new name, with
// the same tables, shards and placements as the template. Nodes are named
// by host and port, never by database, so nothing in the copied metadata
// points back at the template.
//
// Cloning needs a template nobody is connected to, which Citus makes hard:
// its maintenance daemon keeps a connection to every database holding the
// extension, on every node, and the coordinator's daemon and backends also
// hold connections to the workers' databases. MakeTemplate settles that: on
// the coordinator first (whose sessions are the ones that connect to the
// workers), then on the workers, it marks the database IS_TEMPLATE and
// ALLOW_CONNECTIONS false, terminates every session connected to it (the
// daemon included) and waits until none is left. The daemon is started by
// the first session in a database, so with connections refused none comes
// back, and clones can be made from the template for as long as it exists.
// Each clone gets its own daemon on first use.
//
// Only Linux is supported (package pgserver's servers are Linux-only).
package pgcitus

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runledger-go/runledger/internal/pgserver"
)

// EnvCitus names the environment variable that turns the Citus test lane
// on: when it is 1, package testdb gives every test a database on a Citus
// cluster instead of a single server, and this package's own tests run
// (they skip, saying how to run them, otherwise).
const EnvCitus = "RUNLEDGER_TEST_CITUS"

// host is the address every node listens on and is registered under.
const host = "127.0.0.1"

// templateWait bounds how long MakeTemplate waits for a database's sessions
// to end once they have been terminated.
const templateWait = 30 * time.Second

// DefaultSettings are the server settings of every node, under the caller's
// Options.Settings (which override them, name by name):
//
//   - shared_preload_libraries=citus: Citus must be loaded at server start;
//   - max_prepared_transactions=200: a transaction that writes on more than
//     one node commits with two-phase commit, which needs prepared
//     transactions on the workers (and may use some on the coordinator);
//   - max_worker_processes=64: Citus runs a maintenance daemon (a
//     background worker) for every database that has the extension, on
//     every node, and PostgreSQL's default of 8 workers would leave the
//     ninth database without one (each session in it then gets a
//     WARNING, "could not start maintenance background worker");
//   - wal_level=logical: shard moves, rebalancing and tenant isolation
//     (citus_move_shard_placement, citus_rebalance_start,
//     isolate_tenant_to_new_shard) copy shards online with logical
//     replication (Start also lets Citus's decoding plugin run where the
//     server restricts output plugins; see trustCitusDecoder);
//   - citus.node_conninfo=sslmode=disable: connections between the nodes
//     stay on loopback, so they skip TLS (with Citus's default,
//     sslmode=require, CREATE EXTENSION citus would also turn on TLS for the
//     server with a self-signed certificate).
var DefaultSettings = map[string]string{
	"shared_preload_libraries":  "citus",
	"max_prepared_transactions": "200",
	"max_worker_processes":      "64",
	"wal_level":                 "logical",
	"citus.node_conninfo":       "sslmode=disable",
}

// Options configures Start. The zero value is a coordinator and two workers,
// fast and non-durable (package pgserver's default), from the binaries pgserver
// finds (RUNLEDGER_PG_BINDIR first).
type Options struct {
	// BinDir is the directory holding initdb and postgres, for binaries
	// that can load citus (see tools/citus). Empty means pgserver's search:
	// RUNLEDGER_PG_BINDIR, then the machine's own binaries.
	BinDir string

	// Workers is the number of worker nodes; zero means 2.
	Workers int

	// Settings are extra server settings for every node, over
	// DefaultSettings (a setting named in both takes this value).
	Settings map[string]string

	// Durable keeps PostgreSQL's default durability settings on every
	// node (see pgserver.Options.Durable).
	Durable bool

	// Logf, if set, receives progress lines (timings). Nil discards them.
	Logf func(format string, args ...any)
}

// Cluster is a running throwaway Citus cluster. Its methods are safe for
// concurrent use, but the database functions must not run at the same time
// on the same database name.
type Cluster struct {
	logf  func(string, ...any)
	nodes []*node // the coordinator first, then the workers

	stopOnce sync.Once
	stopErr  error
}

// node is one server of the cluster and a small pool on its maintenance
// database ("postgres"), for CREATE, ALTER and DROP DATABASE.
type node struct {
	srv   *pgserver.Server
	admin *pgxpool.Pool
}

// Start starts the servers (in parallel), creates the citus extension in
// each node's maintenance database and registers the nodes on the
// coordinator (citus_set_coordinator_host, then citus_add_node for each
// worker). ctx bounds the start only. On error nothing is left running.
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	logf := opts.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	workers := opts.Workers
	if workers == 0 {
		workers = 2
	}
	if workers < 0 {
		return nil, fmt.Errorf("pgcitus: %d workers", workers)
	}
	settings := maps.Clone(DefaultSettings)
	maps.Copy(settings, opts.Settings)

	t0 := time.Now()
	c := &Cluster{logf: logf, nodes: make([]*node, 1+workers)}
	for i := range c.nodes {
		c.nodes[i] = &node{}
	}
	err := c.onNodes(c.nodes, func(n *node) error {
		srv, err := pgserver.Start(ctx, pgserver.Options{
			BinDir: opts.BinDir, Durable: opts.Durable, Settings: settings, Logf: logf,
		})
		if err != nil {
			return err
		}
		n.srv = srv
		cfg, err := pgxpool.ParseConfig(srv.URL("postgres"))
		if err != nil {
			return err
		}
		cfg.MaxConns = 4
		n.admin, err = pgxpool.NewWithConfig(ctx, cfg)
		return err
	})
	if err != nil {
		_ = c.Stop()
		return nil, fmt.Errorf("pgcitus: start the nodes: %w", err)
	}
	if err := c.onNodes(c.nodes, func(n *node) error { return trustCitusDecoder(ctx, n.admin) }); err != nil {
		_ = c.Stop()
		return nil, fmt.Errorf("pgcitus: %w", err)
	}
	t1 := time.Now()
	if err := c.setUp(ctx, "postgres"); err != nil {
		_ = c.Stop()
		return nil, fmt.Errorf("pgcitus: %w", err)
	}
	logf("pgcitus: Citus cluster of a coordinator (port %d) and %d workers up in %s (servers %s, extension and nodes %s)",
		c.nodes[0].srv.Port(), workers, time.Since(t0).Round(time.Millisecond),
		t1.Sub(t0).Round(time.Millisecond), time.Since(t1).Round(time.Millisecond))
	return c, nil
}

// Stop stops every node and removes its temp dir. It is idempotent: later
// calls return the first call's result.
func (c *Cluster) Stop() error {
	c.stopOnce.Do(func() {
		var errs []error
		for _, n := range c.nodes {
			if n.admin != nil {
				n.admin.Close()
			}
			if n.srv != nil {
				errs = append(errs, n.srv.Stop())
			}
		}
		if err := errors.Join(errs...); err != nil {
			c.stopErr = fmt.Errorf("pgcitus: stop: %w", err)
		}
	})
	return c.stopErr
}

// URL returns the connection URL of database dbname ("postgres" if empty) on
// the coordinator, the node that clients talk to.
func (c *Cluster) URL(dbname string) string { return c.nodes[0].srv.URL(dbname) }

// NodeURLs returns the connection URL of database dbname on every node, the
// coordinator first, then the workers in the order they were registered.
// Connecting to a worker is for inspection (shards, metadata); statements
// go through the coordinator.
func (c *Cluster) NodeURLs(dbname string) []string {
	urls := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		urls[i] = n.srv.URL(dbname)
	}
	return urls
}

// Coordinator returns the coordinator's server.
func (c *Cluster) Coordinator() *pgserver.Server { return c.nodes[0].srv }

// Workers returns the workers' servers, in the order they were registered.
func (c *Cluster) Workers() []*pgserver.Server {
	out := make([]*pgserver.Server, 0, len(c.nodes)-1)
	for _, n := range c.nodes[1:] {
		out = append(out, n.srv)
	}
	return out
}

// CreateDatabase creates database name on every node from template0, with
// the citus extension in each and the nodes registered in the coordinator's
// copy, and returns its URL on the coordinator. It costs about a second (see
// CloneDatabase for the fast way). On error the database is dropped from
// every node again.
func (c *Cluster) CreateDatabase(ctx context.Context, name string) (string, error) {
	err := c.exec(ctx, c.nodes, "CREATE DATABASE "+ident(name)+" TEMPLATE template0")
	if err == nil {
		err = c.setUp(ctx, name)
	}
	if err != nil {
		return "", errors.Join(fmt.Errorf("pgcitus: create database %s: %w", name, err), c.DropDatabase(ctx, name))
	}
	return c.URL(name), nil
}

// CloneDatabase creates database name on every node at once as a copy of
// template (CREATE DATABASE name TEMPLATE template), which must have been
// made a template with MakeTemplate, and returns its URL on the
// coordinator. The clone is a distributed database of its own: its tables,
// shards and placements are the template's, and writes to it never reach
// the template or other clones. On error whatever was created is dropped.
func (c *Cluster) CloneDatabase(ctx context.Context, name, template string) (string, error) {
	if err := c.exec(ctx, c.nodes, "CREATE DATABASE "+ident(name)+" TEMPLATE "+ident(template)); err != nil {
		return "", errors.Join(fmt.Errorf("pgcitus: clone %s as %s: %w", template, name, err), c.DropDatabase(ctx, name))
	}
	return c.URL(name), nil
}

// MakeTemplate turns database name into a template on every node: marked
// IS_TEMPLATE, with connections refused (ALLOW_CONNECTIONS false), and
// every session in it terminated, Citus's maintenance daemon included. It
// acts on the coordinator first, whose sessions hold connections to the
// workers' databases, then on the workers, and returns once no session is
// left on any node. Callers must have closed their own connections to the
// database (they are terminated otherwise).
func (c *Cluster) MakeTemplate(ctx context.Context, name string) error {
	for _, group := range [][]*node{c.nodes[:1], c.nodes[1:]} {
		err := c.onNodes(group, func(n *node) error {
			if _, err := n.admin.Exec(ctx, "ALTER DATABASE "+ident(name)+" WITH IS_TEMPLATE true ALLOW_CONNECTIONS false"); err != nil {
				return err
			}
			return terminateSessions(ctx, n.admin, name)
		})
		if err != nil {
			return fmt.Errorf("pgcitus: make %s a template: %w", name, err)
		}
	}
	return nil
}

// RenameDatabase renames database from to to on every node, coordinator
// first. A database can be renamed only while nobody is connected to it, so
// from should have been made a template with MakeTemplate (renaming keeps
// it one).
func (c *Cluster) RenameDatabase(ctx context.Context, from, to string) error {
	for _, group := range [][]*node{c.nodes[:1], c.nodes[1:]} {
		if err := c.exec(ctx, group, "ALTER DATABASE "+ident(from)+" RENAME TO "+ident(to)); err != nil {
			return fmt.Errorf("pgcitus: rename %s to %s: %w", from, to, err)
		}
	}
	return nil
}

// DropDatabase drops database name, if it exists, from every node, WITH
// (FORCE): sessions still connected to it are terminated. A template made
// by MakeTemplate is dropped too.
//
// Sessions in a distributed database open more sessions in it on other
// nodes (a coordinator backend on the workers, a worker backend on the
// other workers, Citus's maintenance daemon on all), and they end one
// after the other once their origin is gone; DROP DATABASE fails if one
// connects while it waits for the terminated ones to exit. So connections
// to the database are refused on every node first, then it is dropped on
// the coordinator and then on the workers.
func (c *Cluster) DropDatabase(ctx context.Context, name string) error {
	err := c.onNodes(c.nodes, func(n *node) error {
		var exists bool
		if err := n.admin.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&exists); err != nil || !exists {
			return err
		}
		_, err := n.admin.Exec(ctx, "ALTER DATABASE "+ident(name)+" WITH IS_TEMPLATE false ALLOW_CONNECTIONS false")
		return err
	})
	if err != nil {
		return fmt.Errorf("pgcitus: drop database %s: refuse connections: %w", name, err)
	}
	for _, group := range [][]*node{c.nodes[:1], c.nodes[1:]} {
		if err := c.dropOn(ctx, group, name); err != nil {
			return fmt.Errorf("pgcitus: drop database %s: %w", name, err)
		}
	}
	return nil
}

// dropOn drops database name on nodes. WITH (FORCE) terminates the
// sessions but gives up (55006) when one has not exited within five
// seconds, which a loaded machine sees now and then (Citus's
// maintenance daemon of the database, a worker's connection from the
// coordinator): the drop is tried again, up to four times in all.
func (c *Cluster) dropOn(ctx context.Context, nodes []*node, name string) error {
	var err error
	for attempt := 1; attempt <= 4; attempt++ {
		err = c.exec(ctx, nodes, "DROP DATABASE IF EXISTS "+ident(name)+" WITH (FORCE)")
		var pgErr *pgconn.PgError
		if err == nil || !errors.As(err, &pgErr) || pgErr.Code != "55006" {
			return err
		}
		select {
		case <-ctx.Done():
			return errors.Join(err, ctx.Err())
		case <-time.After(time.Duration(attempt) * 250 * time.Millisecond):
		}
	}
	return err
}

// setUp creates the citus extension in database dbname on every node (if
// it is not there yet) and registers the nodes in the coordinator's copy.
func (c *Cluster) setUp(ctx context.Context, dbname string) error {
	err := c.onNodes(c.nodes, func(n *node) error {
		conn, err := pgx.Connect(ctx, n.srv.URL(dbname))
		if err != nil {
			return err
		}
		defer conn.Close(context.WithoutCancel(ctx))
		_, err = conn.Exec(ctx, "CREATE EXTENSION IF NOT EXISTS citus")
		return err
	})
	if err != nil {
		return fmt.Errorf("create extension citus in %s: %w", dbname, err)
	}
	conn, err := pgx.Connect(ctx, c.URL(dbname))
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "SELECT citus_set_coordinator_host($1, $2)", host, c.nodes[0].srv.Port()); err != nil {
		return fmt.Errorf("citus_set_coordinator_host in %s: %w", dbname, err)
	}
	for _, n := range c.nodes[1:] {
		if _, err := conn.Exec(ctx, "SELECT citus_add_node($1, $2)", host, n.srv.Port()); err != nil {
			return fmt.Errorf("citus_add_node %s:%d in %s: %w", host, n.srv.Port(), dbname, err)
		}
	}
	return nil
}

// trustCitusDecoder lets Citus's own logical decoding plugin run on the
// node, where the server restricts output plugins: PostgreSQL minors that
// have the output_plugin_libraries setting (15.20 has it) refuse plugins it
// does not list, and Citus splits shards (isolate_tenant_to_new_shard,
// citus_split_shard_by_split_points) by decoding with the plugin named
// citus. The setting is written with ALTER SYSTEM into the throwaway data
// directory and takes effect on reload; on servers without it nothing is
// done.
func trustCitusDecoder(ctx context.Context, admin *pgxpool.Pool) error {
	var libs []string
	err := admin.QueryRow(ctx, `
		SELECT coalesce(array_agg(trim(lib)), '{}')
		FROM pg_settings, unnest(string_to_array(setting, ',')) AS lib
		WHERE name = 'output_plugin_libraries' AND trim(lib) <> ''`).Scan(&libs)
	if err != nil {
		return fmt.Errorf("read output_plugin_libraries: %w", err)
	}
	var exists bool
	if err := admin.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_settings WHERE name = 'output_plugin_libraries')").Scan(&exists); err != nil {
		return err
	}
	if !exists || slices.Contains(libs, "citus") {
		return nil
	}
	quoted := make([]string, 0, len(libs)+1)
	for _, l := range append(libs, "citus") {
		quoted = append(quoted, "'"+strings.ReplaceAll(l, "'", "''")+"'")
	}
	if _, err := admin.Exec(ctx, "ALTER SYSTEM SET output_plugin_libraries = "+strings.Join(quoted, ", ")); err != nil {
		return fmt.Errorf("trust the citus output plugin: %w", err)
	}
	if _, err := admin.Exec(ctx, "SELECT pg_reload_conf()"); err != nil {
		return err
	}
	return nil
}

// exec runs one statement on the maintenance database of each of nodes, in
// parallel.
func (c *Cluster) exec(ctx context.Context, nodes []*node, sql string) error {
	return c.onNodes(nodes, func(n *node) error {
		_, err := n.admin.Exec(ctx, sql)
		return err
	})
}

// onNodes runs f for each of nodes in parallel and joins the errors, each
// prefixed with the node's port.
func (c *Cluster) onNodes(nodes []*node, f func(*node) error) error {
	errs := make([]error, len(nodes))
	var wg sync.WaitGroup
	for i, n := range nodes {
		wg.Go(func() {
			if err := f(n); err != nil {
				where := "node " + strconv.Itoa(i)
				if n.srv != nil {
					where = "node on port " + strconv.Itoa(n.srv.Port())
				}
				errs[i] = fmt.Errorf("%s: %w", where, err)
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// terminateSessions terminates every session connected to database name and
// waits until none is left. Terminating again on each round also catches a
// session that connected just before connections were refused.
func terminateSessions(ctx context.Context, admin *pgxpool.Pool, name string) error {
	ctx, cancel := context.WithTimeout(ctx, templateWait)
	defer cancel()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		// The sessions seen (and signalled) this round; a terminated
		// session stays listed until it has exited.
		var left int
		err := admin.QueryRow(ctx, `
			SELECT count(pg_terminate_backend(pid))
			FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()`, name).Scan(&left)
		if err != nil {
			return err
		}
		if left == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d sessions still connected to %s: %w", left, name, ctx.Err())
		case <-tick.C:
		}
	}
}

// ident quotes a database name for SQL.
func ident(name string) string { return pgx.Identifier{name}.Sanitize() }

// BinDir returns the directory of server binaries that can load citus:
// $RUNLEDGER_PG_BINDIR when it is set, else the directory tools/citus
// prints (the script is found at the root of the module above the working
// directory, as in go test; on the machine's first call it builds Citus,
// which takes a minute or two). Either way the directory must have
// citus.so in the lib directory beside it.
func BinDir(ctx context.Context) (string, error) {
	dir := os.Getenv(pgserver.EnvBinDir)
	if dir == "" {
		script, err := findScript()
		if err != nil {
			return "", err
		}
		var stderr bytes.Buffer
		cmd := exec.CommandContext(ctx, script)
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			return "", fmt.Errorf("pgcitus: %s: %w\n%s", script, err, strings.TrimSpace(stderr.String()))
		}
		dir = strings.TrimSpace(string(out))
	}
	lib := filepath.Join(filepath.Dir(filepath.Clean(dir)), "lib", "citus.so")
	if _, err := os.Stat(lib); err != nil {
		return "", fmt.Errorf("pgcitus: the server binaries in %s cannot load citus (no %s); "+
			"set %s=$(tools/citus), or unset it to let the tests run tools/citus", dir, lib, pgserver.EnvBinDir)
	}
	return dir, nil
}

// findScript returns the path of tools/citus in the nearest directory at
// or above the working directory that has one (the repository root, when
// go test runs a package).
func findScript() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("pgcitus: %w", err)
	}
	for dir := wd; ; dir = filepath.Dir(dir) {
		script := filepath.Join(dir, "tools", "citus")
		if fi, err := os.Stat(script); err == nil && fi.Mode().IsRegular() {
			return script, nil
		}
		if filepath.Dir(dir) == dir {
			return "", fmt.Errorf("pgcitus: %s is not set and there is no tools/citus at or above %s to build the binaries with", pgserver.EnvBinDir, wd)
		}
	}
}
