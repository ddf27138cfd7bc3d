package main

import (
	"context"
	"fmt"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/internal/pgserver"
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
	// Kind is "configured" or "local" (PostgreSQL binaries, package
	// pgserver).
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
// throwaway one from PostgreSQL's server binaries: those in
// RUNLEDGER_PG_BINDIR if set, else the machine's own (fast, no durability:
// fsync off). The server dies with this process even if Close is never
// called. With no binaries, the error says what to install. The command
// line starts no Docker container: it links no Docker client (the test kit
// may use Docker; the product does not).
func openScratchDatabase(ctx context.Context, inv *invocation) (*scratchDatabase, error) {
	if u, err := inv.URL(); err == nil {
		cfg, err := parseURL(u)
		if err != nil {
			return nil, err
		}
		return &scratchDatabase{URL: u, Kind: "configured", Address: serverAddress(&cfg.ConnConfig.Config)}, nil
	}
	if _, err := pgserver.FindBinDir(""); err != nil {
		return nil, &runledger.Error{
			Code: codeNoServer, Category: runledger.CategoryInternal,
			Message: "no PostgreSQL to run on: no server binaries (initdb, postgres) in RUNLEDGER_PG_BINDIR, on PATH " +
				"or in the usual install directories. Install the PostgreSQL server package (Debian/Ubuntu: apt-get install postgresql; " +
				"Fedora/RHEL: dnf install postgresql-server; macOS: brew install postgresql), " +
				"or set DATABASE_URL to a database this command may write to",
			Err: err,
		}
	}
	srv, err := pgserver.Start(ctx, pgserver.Options{})
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
