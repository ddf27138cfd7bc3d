package testdb

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/ory/dockertest/v3"

	"github.com/runledger-go/runledger/internal/testdb/pgdocker"
	"github.com/runledger-go/runledger/internal/testdb/pgselect"
	"github.com/runledger-go/runledger/internal/testdb/pgtemp"
)

// Environment variables read by testdb.
const (
	// EnvURL names a PostgreSQL server to use instead of starting one: a
	// postgres:// URL or keyword/value string for the server's maintenance
	// database, as a role that may CREATE DATABASE (PostgreSQL 13 or newer,
	// for DROP DATABASE ... WITH (FORCE)).
	EnvURL = "RUNLEDGER_TEST_DATABASE_URL"
	// EnvImage overrides the Docker image (default DefaultImage).
	EnvImage = "RUNLEDGER_TEST_POSTGRES_IMAGE"
	// DefaultImage is the Docker image used when a daemon answers.
	DefaultImage = pgdocker.DefaultImage
)

// Server kinds (see package pgselect for the order).
const (
	kindURL    = string(pgselect.SourceURL)
	kindDocker = string(pgselect.SourceDocker)
	kindLocal  = string(pgselect.SourceLocal)
)

// testSettings are the server settings for servers testdb starts itself:
// throwaway data, so no durability (pgtemp's default does the same), and
// room for parallel tests that each hold a pool.
var testSettings = []string{
	"fsync=off", "synchronous_commit=off", "full_page_writes=off", "max_connections=200",
}

// errNoServer is the root of the error returned when no server is available.
var errNoServer = errors.New("testdb: no PostgreSQL server available for tests")

// chooseServer picks where test databases come from, in package pgselect's
// order: the URL in EnvURL if set, else the binaries in
// $RUNLEDGER_PG_BINDIR if set, else Docker if dockerPing succeeds, else
// local server binaries if localBinaries finds them. Each probe runs only if
// the ones before it did not settle the choice. With none available the
// error (errNoServer) says what to install, with each probe's reason.
func chooseServer(getenv func(string) string, dockerPing func() error, localBinaries func() error) (string, error) {
	src, err := pgselect.Choose(pgselect.Probes{
		URL:    getenv(EnvURL) != "",
		BinDir: getenv(pgtemp.EnvBinDir),
		Docker: dockerPing,
		Local:  localBinaries,
	})
	var none *pgselect.NoServerError
	if errors.As(err, &none) {
		return "", fmt.Errorf("%w. Provide one of:\n"+
			"  - %s: a URL of a PostgreSQL 13+ server's maintenance database, as a role that may create databases\n"+
			"    (e.g. postgres://postgres:secret@localhost:5432/postgres?sslmode=disable);\n"+
			"  - Docker: install it and start the daemon (tried: %v);\n"+
			"  - PostgreSQL server binaries: install the postgresql server package, e.g. apt-get install postgresql on Debian/Ubuntu,\n"+
			"    or set %s to a bin directory (tools/pgbin MAJOR fetches one) (tried: %v)",
			errNoServer, EnvURL, none.Docker, pgtemp.EnvBinDir, none.Local)
	}
	return string(src), err
}

// server is the PostgreSQL server one test binary uses.
type server struct {
	kind     string
	adminURL string        // maintenance database
	admin    *pgxpool.Pool // CREATE and DROP DATABASE; never connected to a template
	stop     func() error  // nil for a server we did not start
}

// dbURL returns the connection string for database name on this server.
func (s *server) dbURL(name string) string {
	return mustWithDatabase(s.adminURL, name) // adminURL was validated at setup
}

// close releases the admin pool and stops a server we started.
func (s *server) close() error {
	s.admin.Close()
	if s.stop == nil {
		return nil
	}
	return s.stop()
}

// startServer chooses a server (see chooseServer), starts it if it is ours
// and opens the admin pool.
func startServer(ctx context.Context) (*server, error) {
	var pool *dockertest.Pool
	kind, err := chooseServer(os.Getenv,
		func() error {
			p, err := dockerPing(ctx)
			pool = p
			return err
		},
		func() error {
			_, err := pgtemp.FindBinDir("")
			return err
		})
	if err != nil {
		return nil, err
	}

	t0 := time.Now()
	s := &server{kind: kind}
	switch kind {
	case kindURL:
		s.adminURL = os.Getenv(EnvURL)
	case kindDocker:
		s.adminURL, s.stop, err = startDocker(ctx, pool)
	case kindLocal:
		s.adminURL, s.stop, err = startLocal(ctx)
	}
	if err != nil {
		return nil, err
	}
	if _, err := withDatabase(s.adminURL, "x"); err != nil {
		return nil, closeAfter(s, fmt.Errorf("testdb: %s: %w", EnvURL, err))
	}
	if s.admin, err = pgxpool.New(ctx, s.adminURL); err != nil {
		return nil, closeAfter(s, fmt.Errorf("testdb: admin pool: %w", err))
	}
	version, err := checkServer(ctx, s.admin)
	if err != nil {
		return nil, closeAfter(s, fmt.Errorf("testdb: %s server: %w", kind, err))
	}
	logf("using a %s PostgreSQL %s server (ready in %s)", kind, version, time.Since(t0).Round(time.Millisecond))
	return s, nil
}

// closeAfter stops a half-set-up server and returns err.
func closeAfter(s *server, err error) error {
	if s.admin != nil {
		s.admin.Close()
	}
	if s.stop != nil {
		_ = s.stop()
	}
	return err
}

// checkServer verifies what the clones rely on: PostgreSQL 13+ (DROP
// DATABASE ... WITH (FORCE)) and UTF8 in template0 (the empty databases and
// the template are created from it). It returns the server's version text
// (server_version, e.g. "13.23").
func checkServer(ctx context.Context, admin *pgxpool.Pool) (string, error) {
	var version int
	var text, encoding string
	err := admin.QueryRow(ctx, `
		SELECT current_setting('server_version_num')::int, current_setting('server_version'),
		       (SELECT pg_encoding_to_char(encoding) FROM pg_database WHERE datname = 'template0')`).
		Scan(&version, &text, &encoding)
	if err != nil {
		return "", err
	}
	if version < 130000 {
		return "", fmt.Errorf("PostgreSQL %d is too old; 13 or newer is required", version)
	}
	if encoding != "UTF8" {
		return "", fmt.Errorf("template0 has encoding %s; UTF8 is required", encoding)
	}
	return text, nil
}

// startLocal starts a throwaway server from local binaries (pgtemp).
func startLocal(ctx context.Context) (string, func() error, error) {
	settings := map[string]string{}
	for _, kv := range testSettings {
		k, v, _ := strings.Cut(kv, "=")
		settings[k] = v
	}
	srv, err := pgtemp.Start(ctx, pgtemp.Options{Settings: settings, Logf: logf})
	if err != nil {
		return "", nil, fmt.Errorf("testdb: local server: %w", err)
	}
	return srv.URL("postgres"), srv.Stop, nil
}

// dockerPing returns a pool for the Docker daemon if one answers a ping
// within five seconds.
func dockerPing(ctx context.Context) (*dockertest.Pool, error) {
	return pgdocker.Ping(ctx, 5*time.Second)
}

// startDocker runs the PostgreSQL image (EnvImage, default DefaultImage)
// and waits until it accepts connections. The container removes itself
// when stopped, and is stopped by the returned function or, if this
// process dies first, by the daemon once the test binary's deadline has
// passed.
func startDocker(ctx context.Context, pool *dockertest.Pool) (string, func() error, error) {
	image := os.Getenv(EnvImage)
	if image == "" {
		image = DefaultImage
	}
	srv, err := pgdocker.Start(ctx, pool, pgdocker.Options{
		Image: image, Settings: testSettings, Label: "dev.runledger.testdb", Lifetime: containerLifetime(),
	})
	if err != nil {
		return "", nil, fmt.Errorf("testdb: %w", err)
	}
	return srv.URL, srv.Stop, nil
}

// containerLifetime is how long a Docker server may live: longer than the
// test binary may run (-test.timeout), so that only a crashed run meets it.
func containerLifetime() time.Duration {
	if f := flag.Lookup("test.timeout"); f != nil {
		if g, ok := f.Value.(flag.Getter); ok {
			if d, ok := g.Get().(time.Duration); ok && d > 0 {
				return d + 5*time.Minute
			}
		}
	}
	return 2 * time.Hour
}

// withDatabase returns connString (a URL or keyword/value string) pointed at
// database name.
func withDatabase(connString, name string) (string, error) {
	if strings.HasPrefix(connString, "postgres://") || strings.HasPrefix(connString, "postgresql://") {
		u, err := url.Parse(connString)
		if err != nil {
			return "", fmt.Errorf("parse database URL: %w", err)
		}
		u.Path = "/" + name
		u.RawPath = ""
		return u.String(), nil
	}
	if _, err := pgx.ParseConfig(connString); err != nil {
		return "", fmt.Errorf("parse connection string: %w", err)
	}
	// In keyword/value form the last occurrence of a keyword wins.
	quoted := strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(name)
	return connString + " dbname='" + quoted + "'", nil
}

// RandomHex returns 2n random hex digits, for unique names.
func RandomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return hex.EncodeToString(b)
}
