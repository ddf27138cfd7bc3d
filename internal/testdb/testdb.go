// Package testdb gives each test its own PostgreSQL database, migrated to the
// current schema, on a real server.
//
// A test binary uses one server, chosen on first use in package pgselect's
// order: the URL in RUNLEDGER_TEST_DATABASE_URL; a throwaway server from the
// binaries in RUNLEDGER_PG_BINDIR when that is set (how the version matrix
// picks a major); a container from Docker (image
// RUNLEDGER_TEST_POSTGRES_IMAGE, default postgres:15) when a daemon answers a
// ping; a throwaway server from the machine's own binaries (package pgserver).
// Servers that testdb starts run with fsync=off. With none available, tests fail with a
// message naming what to install; they never skip.
//
// The Citus lane (RUNLEDGER_TEST_CITUS=1, as `make test-citus` sets it)
// replaces that choice: the binary starts a Citus cluster of its own, a
// coordinator and two workers on loopback (package pgcitus), from the
// binaries in RUNLEDGER_PG_BINDIR or, when that is not set, from those
// tools/citus builds. Every database New, NewURL and NewEmpty return is
// then a distributed database, the same name on every node, and its URL
// is the coordinator's; the suites run unchanged. The migrated template
// is cloned on every node at once (see package pgcitus for why that is
// correct), which costs a few hundred milliseconds per test, and the
// template build fails unless the migrations leave every table
// distributed or a reference table.
//
// The schema's migrations (package schema, applied with package goose) are
// applied once per server to a template database named after a hash of the
// migration files; each New or NewURL clones it with CREATE DATABASE ...
// TEMPLATE, which takes tens of milliseconds. Test binaries sharing a server
// (the URL case, or packages run in parallel by go test ./...) build the
// template only once between them.
//
// Every package that uses testdb needs
//
//	func TestMain(m *testing.M) { testdb.Main(m) }
//
// so that the server is stopped, or its container removed, when the tests
// end; New and friends fail the test without it.
//
// On a shared server (RUNLEDGER_TEST_DATABASE_URL), templates of earlier
// schema versions and the databases of test runs that crashed stay behind:
// they are named runledger_tmpl_* and rl_test_*, and can be dropped by hand
// when no tests are running.
//
// Beside databases, testdb holds what every package's tests share: test SQL
// that fails the test on error (Exec, Scalar, Column, Count, EventTypes),
// ledger states to start from, written in SQL (DefineType, Seed) or through
// packages jobs and lease (Define, Enqueue, Claim, Leased, Completed),
// connections and transactions that end with the test (Connect, OpenPool, Begin, InTx,
// ClosedPool), lock observation without sleeps (RowLocked, WaitBlocked,
// WaitFor), round-trip counting (CountingPool, Trips) and error and
// outcome checks (WantCode, WantTransient, WantCommitUnconfirmed,
// MustReplayed). It is tooling: no library package imports it.
package testdb

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runledger-go/runledger/goose"
	"github.com/runledger-go/runledger/schema"
)

// clonePrefix starts the name of every database New, NewURL and NewEmpty
// create.
const clonePrefix = "rl_test_"

// setupTimeout bounds starting a server (a Docker image pull included) and
// building the template.
const setupTimeout = 5 * time.Minute

var (
	// mainRunning is set by Main; without it nothing would stop the server.
	mainRunning atomic.Bool

	// state is the binary's server and template, set up on first use.
	state struct {
		mu       sync.Mutex
		srv      *server
		srvErr   error
		tmpl     string
		tmplErr  error
		tornDown bool
		// unowned lists databases made by NewURLForExample, dropped at
		// teardown since no test cleanup owns them.
		unowned []string
	}
)

// Main runs the tests of a package that uses testdb, then stops the server
// testdb started for them (or removes its Docker container), and exits with
// the tests' status (1 if they passed but the teardown failed). Call it from
// TestMain:
//
//	func TestMain(m *testing.M) { testdb.Main(m) }
//
// On SIGINT or SIGTERM (Ctrl-C) it tears the server down first, then lets
// the signal end the process as it would have.
func Main(m *testing.M) {
	mainRunning.Store(true)
	stopSignals := teardownOnSignal()
	code := m.Run()
	stopSignals()
	if err := teardown(); err != nil {
		fmt.Fprintf(os.Stderr, "testdb: teardown: %v\n", err)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}

// New returns a pool on a fresh database cloned from the migrated template.
// The database belongs to this test alone: at cleanup the pool is closed and
// the database dropped WITH (FORCE), so connections the test left open do
// not block the drop. Safe under t.Parallel. It fails the test (never skips)
// if no server is available, so, like t.Fatal, it must be called from the
// goroutine running the test. The first call in a test binary sets up the
// server and the template (about a second with local binaries); later calls
// cost one CREATE DATABASE.
func New(t testing.TB) *pgxpool.Pool {
	t.Helper()
	url := NewURL(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatalf("testdb: open pool: %v", err)
	}
	t.Cleanup(pool.Close) // runs before the drop registered by NewURL
	return pool
}

// NewURL is New for tests that open their own connections (a custom pool
// configuration, database/sql, a command-line subprocess): it returns the
// connection string of a fresh migrated clone, dropped WITH (FORCE) at
// cleanup.
func NewURL(t testing.TB) string {
	t.Helper()
	srv := mustServer(t)
	tmpl := mustTemplate(t, srv)
	return createDatabase(t, srv, tmpl)
}

// NewEmpty returns the connection string of a fresh empty database (created
// from template0: no migrations, no goose version table), for tests of the
// migrations themselves. It is dropped WITH (FORCE) at cleanup. In the Citus
// lane it is a distributed database with the citus extension and the nodes
// registered, and nothing else.
func NewEmpty(t testing.TB) string {
	t.Helper()
	srv := mustServer(t)
	return createDatabase(t, srv, srv.emptyTemplate())
}

// AdminURL returns the connection string of the server's maintenance
// database, as a role that may create databases. The server may be shared
// with other test binaries: create only uniquely named objects there, and
// never connect to a runledger_tmpl_* template.
func AdminURL(t testing.TB) string {
	t.Helper()
	return mustServer(t).adminURL
}

// NewURLForExample is NewURL for code that has no testing.TB, such as the
// Example functions of a package whose TestMain calls Main: it returns the
// connection string of a fresh migrated clone, dropped when Main tears the
// server down.
func NewURLForExample() (string, error) {
	return exampleDatabase(func(srv *server) (string, error) {
		state.mu.Lock()
		defer state.mu.Unlock()
		if state.tmpl == "" && state.tmplErr == nil {
			state.tmpl, state.tmplErr = setupTemplate(srv)
		}
		return state.tmpl, state.tmplErr
	})
}

// NewEmptyURLForExample is NewEmpty for Example functions, as
// NewURLForExample is NewURL: a fresh database with no migrations, dropped
// when Main tears the server down.
func NewEmptyURLForExample() (string, error) {
	return exampleDatabase(func(srv *server) (string, error) { return srv.emptyTemplate(), nil })
}

// exampleDatabase creates a database from the template that template
// names and registers it to be dropped by Main.
func exampleDatabase(template func(*server) (string, error)) (string, error) {
	if !mainRunning.Load() {
		return "", errors.New("testdb: an example's database needs a TestMain calling testdb.Main")
	}
	srv, err := getServer()
	if err != nil {
		return "", err
	}
	tmpl, err := template(srv)
	if err != nil {
		return "", err
	}
	name := clonePrefix + RandomHex(6)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := srv.createDB(ctx, name, tmpl); err != nil {
		return "", err
	}
	state.mu.Lock()
	state.unowned = append(state.unowned, name)
	state.mu.Unlock()
	return srv.dbURL(name), nil
}

// createDatabase creates a uniquely named copy of database template,
// registers its drop and returns its connection string.
func createDatabase(t testing.TB, srv *server, template string) string {
	t.Helper()
	name := clonePrefix + RandomHex(6)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := srv.createDB(ctx, name, template); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := srv.dropDB(ctx, name); err != nil {
			t.Error(err)
		}
	})
	return srv.dbURL(name)
}

// mustServer returns the binary's server, setting it up on first use.
func mustServer(t testing.TB) *server {
	t.Helper()
	if !mainRunning.Load() {
		t.Fatal("testdb: this package has no TestMain calling testdb.Main, so nothing would stop the test server; add\n" +
			"\tfunc TestMain(m *testing.M) { testdb.Main(m) }")
	}
	srv, err := getServer()
	if err != nil {
		t.Fatal(err)
	}
	return srv
}

// getServer returns the binary's server, starting it on the first call. An
// error is remembered: later calls fail the same way without retrying.
func getServer() (*server, error) {
	state.mu.Lock()
	defer state.mu.Unlock()
	if state.tornDown {
		return nil, errors.New("testdb: the test server has been torn down")
	}
	if state.srv == nil && state.srvErr == nil {
		ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
		defer cancel()
		state.srv, state.srvErr = startServer(ctx)
	}
	return state.srv, state.srvErr
}

// mustTemplate returns the name of the migrated template on srv, building it
// on the first call in this binary.
func mustTemplate(t testing.TB, srv *server) string {
	t.Helper()
	state.mu.Lock()
	defer state.mu.Unlock()
	if state.tmpl == "" && state.tmplErr == nil {
		state.tmpl, state.tmplErr = setupTemplate(srv)
	}
	if state.tmplErr != nil {
		t.Fatal(state.tmplErr)
	}
	return state.tmpl
}

// setupTemplate names the template after the embedded migrations and makes
// sure it exists on srv.
func setupTemplate(srv *server) (string, error) {
	sum, err := migrationsHash(schema.FS)
	if err != nil {
		return "", fmt.Errorf("testdb: %w", err)
	}
	name := templatePrefix + sum
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	t0 := time.Now()
	var built bool
	if srv.citus != nil {
		built, err = true, buildCitusTemplate(ctx, srv.citus, name, goose.Up)
	} else {
		built, err = ensureTemplate(ctx, srv.adminURL, name, goose.Up)
	}
	if err != nil {
		return "", fmt.Errorf("testdb: template %s: %w", name, err)
	}
	if built {
		logf("built template %s in %s", name, time.Since(t0).Round(time.Millisecond))
	}
	return name, nil
}

// teardown stops the server, if one was started. Later calls, and tests
// that ask for a server afterwards, get nothing new.
func teardown() error {
	state.mu.Lock()
	defer state.mu.Unlock()
	state.tornDown = true
	if state.srv == nil {
		return nil
	}
	srv := state.srv
	state.srv = nil
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var dropErr error
	for _, name := range state.unowned {
		if err := srv.dropDB(ctx, name); err != nil && dropErr == nil {
			dropErr = err
		}
	}
	state.unowned = nil
	return errors.Join(dropErr, srv.close())
}

// teardownOnSignal tears the server down on SIGINT or SIGTERM and then
// re-raises the signal, so the process ends as it would have without us.
// The returned function stops watching.
func teardownOnSignal() (stop func()) {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		select {
		case sig := <-ch:
			if err := teardown(); err != nil {
				fmt.Fprintf(os.Stderr, "testdb: teardown on %v: %v\n", sig, err)
			}
			signal.Reset(sig)
			_ = syscall.Kill(os.Getpid(), sig.(syscall.Signal))
		case <-done:
		}
	}()
	return func() {
		signal.Stop(ch)
		close(done)
	}
}

// logf reports setup progress on stderr under go test -v.
func logf(format string, args ...any) {
	if testing.Verbose() {
		fmt.Fprintf(os.Stderr, "testdb: "+format+"\n", args...)
	}
}

// Citus reports whether this test binary runs in the Citus lane, for the
// few assertions that differ there (say why beside each).
func Citus() bool { return os.Getenv(EnvCitus) == "1" }
