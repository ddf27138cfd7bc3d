package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/ory/dockertest/v3"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/internal/testdb/pgdocker"
	"github.com/runledger-go/runledger/internal/testdb/pgselect"
	"github.com/runledger-go/runledger/internal/testdb/pgtemp"
)

// codeNoServer: no database configured and no way to start one.
const codeNoServer runledger.Code = "cli.no_database_server"

// scratchDatabase is the database a self-contained command (demo, and
// anything else that must run on a fresh machine) works on: the configured
// one (--database-url or DATABASE_URL), else a throwaway server it starts
// and Close removes.
type scratchDatabase struct {
	// URL connects to the database.
	URL string
	// Kind is "configured", "local" (PostgreSQL binaries, package pgtemp)
	// or "docker".
	Kind string
	// Address is host:port of the server.
	Address string
	// Dir is the local server's data directory (kind local), removed by
	// Close.
	Dir string
	// BinDir is where the local server's binaries are (kind local).
	BinDir string

	stop func() error
}

// openScratchDatabase returns the configured database, or starts a
// throwaway one, choosing in package pgselect's order: the binaries in
// RUNLEDGER_PG_BINDIR if set, else Docker if a daemon answers, else the
// machine's own server binaries (fast, no durability: fsync off). The server
// dies with this process even if Close is never called. With nothing
// available, the error says what to install.
func openScratchDatabase(ctx context.Context, inv *invocation) (*scratchDatabase, error) {
	u, urlErr := inv.URL()
	var pool *dockertest.Pool
	src, err := pgselect.Choose(pgselect.Probes{
		URL:    urlErr == nil,
		BinDir: os.Getenv(pgtemp.EnvBinDir),
		Docker: func() (err error) {
			pool, err = pgdocker.Ping(ctx, 3*time.Second)
			return err
		},
		Local: func() error {
			_, err := pgtemp.FindBinDir("")
			return err
		},
	})
	var none *pgselect.NoServerError
	switch {
	case errors.As(err, &none):
		return nil, &runledger.Error{
			Code: codeNoServer, Category: runledger.CategoryInternal,
			Message: "no PostgreSQL to run on: no Docker daemon answered, and no server binaries (initdb, postgres) on PATH " +
				"or in the usual install directories. Install the PostgreSQL server package (Debian/Ubuntu: apt-get install postgresql; " +
				"Fedora/RHEL: dnf install postgresql-server; macOS: brew install postgresql), or start Docker, " +
				"or set DATABASE_URL to a database this command may write to",
			Detail: fmt.Sprintf("docker: %v", none.Docker),
			Err:    none.Local,
		}
	case err != nil:
		return nil, err
	}
	switch src {
	case pgselect.SourceURL:
		cfg, err := parseURL(u)
		if err != nil {
			return nil, err
		}
		return &scratchDatabase{URL: u, Kind: "configured", Address: serverAddress(&cfg.ConnConfig.Config)}, nil
	case pgselect.SourceDocker:
		return startDocker(ctx, pool)
	}
	srv, err := pgtemp.Start(ctx, pgtemp.Options{})
	if err != nil {
		return nil, interruptedOr(ctx, fmt.Errorf("start a throwaway PostgreSQL server: %w", err))
	}
	return &scratchDatabase{
		URL: srv.URL("postgres"), Kind: "local", Address: fmt.Sprintf("127.0.0.1:%d", srv.Port()),
		Dir: srv.Dir(), BinDir: srv.BinDir(), stop: srv.Stop,
	}, nil
}

// Close stops a server this process started and removes its data; for a
// configured database it does nothing.
func (s *scratchDatabase) Close() error {
	if s.stop == nil {
		return nil
	}
	stop := s.stop
	s.stop = nil
	return stop()
}

// interruptedOr returns the interruption error when ctx is done, else err.
func interruptedOr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return errInterrupted(err)
	}
	return err
}

// errInterrupted is the error of a command stopped by SIGINT or SIGTERM.
func errInterrupted(cause error) error {
	return &runledger.Error{Code: "cli.interrupted", Category: runledger.CategoryInternal,
		Message: "interrupted", Err: cause}
}

// startDocker runs a throwaway PostgreSQL container (fast settings) and
// waits until it accepts connections. The container removes itself when
// stopped; if this process dies without stopping it, the daemon kills it
// after an hour.
func startDocker(ctx context.Context, pool *dockertest.Pool) (*scratchDatabase, error) {
	srv, err := pgdocker.Start(ctx, pool, pgdocker.Options{
		Settings: []string{"fsync=off", "synchronous_commit=off", "full_page_writes=off"},
		Label:    "dev.runledger.scratch",
		Lifetime: time.Hour,
	})
	if err != nil {
		return nil, interruptedOr(ctx, err)
	}
	return &scratchDatabase{URL: srv.URL, Kind: "docker", Address: srv.HostPort, stop: srv.Stop}, nil
}
