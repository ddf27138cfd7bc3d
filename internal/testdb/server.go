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

	"github.com/runledger-go/runledger/internal/pgserver"
	"github.com/runledger-go/runledger/internal/testdb/pgcitus"
	"github.com/runledger-go/runledger/internal/testdb/pgdocker"
	"github.com/runledger-go/runledger/internal/testdb/pgselect"
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
	// EnvCitus, set to 1, makes every test database a distributed
	// database on a throwaway Citus cluster (a coordinator and two
	// workers, package pgcitus) that the test binary starts from the
	// binaries in RUNLEDGER_PG_BINDIR, or from those tools/citus builds
	// when that is not set. It cannot be combined with EnvURL.
	EnvCitus = pgcitus.EnvCitus
)

// Server kinds (see package pgselect for the order).
const (
	kindURL    = string(pgselect.SourceURL)
	kindDocker = string(pgselect.SourceDocker)
	kindLocal  = string(pgselect.SourceLocal)
	// kindCitus is the Citus lane (EnvCitus), chosen before pgselect's
	// order is consulted.
	kindCitus = "citus"
)

// citusEmptyTemplate is the database, on every node of a Citus cluster,
// that the lane's empty databases and the migrated template are cloned
// from: the citus extension and the nodes registered, nothing else. It
// plays the part template0 plays on a single server.
const citusEmptyTemplate = "runledger_citus_empty"

// citusSettings are the Citus lane's server settings on every node, over
// testSettings and package pgcitus's defaults. Fewer shards than Citus's
// default of 32 make each per-test clone about three times cheaper (every
// worker copies every shard it holds) while every table still spans both
// workers: 4 shards clone in about 0.25 s, 32 in about 0.75 s. Routing
// (Task Count: 1 for a statement naming its tenant) does not depend on
// the count. The workers take connections from the coordinator's sessions
// on top of their own, hence more connections.
var citusSettings = map[string]string{
	"citus.shard_count": "4",
	"max_connections":   "300",
}

// testSettings are the server settings for servers testdb starts itself:
// throwaway data, so no durability (pgserver's default does the same), and
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
	switch getenv(EnvCitus) {
	case "", "0":
	case "1":
		if getenv(EnvURL) != "" {
			return "", fmt.Errorf("testdb: %s=1 starts a Citus cluster of its own; unset %s (a configured server cannot be used in the Citus lane)", EnvCitus, EnvURL)
		}
		return kindCitus, nil
	default:
		return "", fmt.Errorf("testdb: %s=%q: want 1 (the Citus lane) or 0/empty", EnvCitus, getenv(EnvCitus))
	}
	src, err := pgselect.Choose(pgselect.Probes{
		URL:    getenv(EnvURL) != "",
		BinDir: getenv(pgserver.EnvBinDir),
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
			errNoServer, EnvURL, none.Docker, pgserver.EnvBinDir, none.Local)
	}
	return string(src), err
}

// server is the PostgreSQL server one test binary uses.
type server struct {
	kind     string
	adminURL string        // maintenance database
	admin    *pgxpool.Pool // CREATE and DROP DATABASE; never connected to a template
	stop     func() error  // nil for a server we did not start
	// citus is the cluster of kindCitus (nil otherwise); its coordinator
	// is the server adminURL names, and every database function acts on
	// all of its nodes.
	citus *pgcitus.Cluster
}

// createDB creates database name as a copy of template: CREATE DATABASE
// ... TEMPLATE on a single server, the same on every node of a Citus
// cluster (pgcitus.CloneDatabase).
func (s *server) createDB(ctx context.Context, name, template string) error {
	if s.citus != nil {
		_, err := s.citus.CloneDatabase(ctx, name, template)
		return err
	}
	_, err := s.admin.Exec(ctx, "CREATE DATABASE "+ident(name)+" TEMPLATE "+ident(template))
	if err != nil {
		return fmt.Errorf("testdb: create database %s: %w", name, err)
	}
	return nil
}

// dropDB drops database name if it exists, WITH (FORCE), from the server
// or from every node of the cluster.
func (s *server) dropDB(ctx context.Context, name string) error {
	if s.citus != nil {
		return s.citus.DropDatabase(ctx, name)
	}
	_, err := s.admin.Exec(ctx, "DROP DATABASE IF EXISTS "+ident(name)+" WITH (FORCE)")
	if err != nil {
		return fmt.Errorf("testdb: drop database %s: %w", name, err)
	}
	return nil
}

// emptyTemplate names the database that empty databases are copied from.
func (s *server) emptyTemplate() string {
	if s.citus != nil {
		return citusEmptyTemplate
	}
	return "template0"
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
			_, err := pgserver.FindBinDir("")
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
	case kindCitus:
		s.citus, err = startCitus(ctx)
		if err == nil {
			s.adminURL, s.stop = s.citus.URL("postgres"), s.citus.Stop
		}
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
	if s.citus != nil {
		if _, err := s.citus.CreateDatabase(ctx, citusEmptyTemplate); err != nil {
			return nil, closeAfter(s, fmt.Errorf("testdb: %w", err))
		}
		if err := s.citus.MakeTemplate(ctx, citusEmptyTemplate); err != nil {
			return nil, closeAfter(s, fmt.Errorf("testdb: %w", err))
		}
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

// startLocal starts a throwaway server from local binaries (pgserver).
func startLocal(ctx context.Context) (string, func() error, error) {
	settings := map[string]string{}
	for _, kv := range testSettings {
		k, v, _ := strings.Cut(kv, "=")
		settings[k] = v
	}
	srv, err := pgserver.Start(ctx, pgserver.Options{Settings: settings, Logf: logf})
	if err != nil {
		return "", nil, fmt.Errorf("testdb: local server: %w", err)
	}
	return srv.URL("postgres"), srv.Stop, nil
}

// startCitus starts the Citus lane's cluster: a coordinator and two
// workers from the binaries pgcitus.BinDir finds (RUNLEDGER_PG_BINDIR, else
// what tools/citus builds), with the same test settings as a local server.
func startCitus(ctx context.Context) (*pgcitus.Cluster, error) {
	binDir, err := pgcitus.BinDir(ctx)
	if err != nil {
		return nil, fmt.Errorf("testdb: %s=1: %w", EnvCitus, err)
	}
	settings := map[string]string{}
	for _, kv := range testSettings {
		k, v, _ := strings.Cut(kv, "=")
		settings[k] = v
	}
	for k, v := range citusSettings {
		settings[k] = v
	}
	c, err := pgcitus.Start(ctx, pgcitus.Options{BinDir: binDir, Settings: settings, Logf: logf})
	if err != nil {
		return nil, fmt.Errorf("testdb: %s=1: %w", EnvCitus, err)
	}
	return c, nil
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
