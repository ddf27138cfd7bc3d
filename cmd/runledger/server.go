package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/url"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/ory/dockertest/v3"
	"github.com/ory/dockertest/v3/docker"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/internal/pgtemp"
)

// codeNoServer: no database configured and no way to start one.
const codeNoServer = "cli.no_database_server"

// dockerImage is the image a throwaway server runs when there are no local
// server binaries but Docker answers.
const dockerImage = "postgres:15"

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
// throwaway one: from local server binaries if there are any (fast, no
// durability: fsync off), else in Docker if a daemon answers. The server
// dies with this process even if Close is never called. With neither, the
// error says what to install.
func openScratchDatabase(ctx context.Context, inv *invocation) (*scratchDatabase, error) {
	if u, err := inv.URL(); err == nil {
		cfg, err := parseURL(u)
		if err != nil {
			return nil, err
		}
		return &scratchDatabase{URL: u, Kind: "configured", Address: serverAddress(&cfg.ConnConfig.Config)}, nil
	}
	binDir, binErr := pgtemp.FindBinDir("")
	if binErr == nil {
		srv, err := pgtemp.Start(ctx, pgtemp.Options{BinDir: binDir})
		if err != nil {
			return nil, interruptedOr(ctx, fmt.Errorf("start a throwaway PostgreSQL server: %w", err))
		}
		return &scratchDatabase{
			URL: srv.URL("postgres"), Kind: "local", Address: fmt.Sprintf("127.0.0.1:%d", srv.Port()),
			Dir: srv.Dir(), BinDir: binDir, stop: srv.Stop,
		}, nil
	}
	pool, dockerErr := dockerPing(ctx)
	if dockerErr == nil {
		return startDocker(ctx, pool)
	}
	return nil, &runledger.Error{
		Code: codeNoServer, Category: runledger.CategoryInternal,
		Message: "no PostgreSQL to run on: no server binaries (initdb, postgres) on PATH or in the usual install directories, " +
			"and no Docker daemon answered. Install the PostgreSQL server package (Debian/Ubuntu: apt-get install postgresql; " +
			"Fedora/RHEL: dnf install postgresql-server; macOS: brew install postgresql), or start Docker, " +
			"or set DATABASE_URL to a database this command may write to",
		Detail: fmt.Sprintf("docker: %v", dockerErr),
		Err:    binErr,
	}
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

// dockerPing returns a client for the Docker daemon if one answers within
// three seconds.
func dockerPing(ctx context.Context) (*dockertest.Pool, error) {
	pool, err := dockertest.NewPool("")
	if err != nil {
		return nil, fmt.Errorf("docker client: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if err := pool.Client.PingWithContext(ctx); err != nil {
		return nil, fmt.Errorf("docker ping: %w", err)
	}
	return pool, nil
}

// startDocker runs a throwaway PostgreSQL container and waits until it
// accepts connections. The container removes itself when stopped; if this
// process dies without stopping it, the daemon kills it after an hour.
func startDocker(ctx context.Context, pool *dockertest.Pool) (*scratchDatabase, error) {
	secret := make([]byte, 12)
	if _, err := rand.Read(secret); err != nil {
		return nil, err
	}
	password := hex.EncodeToString(secret)
	res, err := pool.RunWithOptions(&dockertest.RunOptions{
		Repository: "postgres",
		Tag:        "15",
		Env:        []string{"POSTGRES_PASSWORD=" + password},
		Cmd:        []string{"postgres", "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off"},
		Labels:     map[string]string{"dev.runledger.scratch": "1"},
	}, func(hc *docker.HostConfig) {
		hc.AutoRemove = true
		hc.RestartPolicy = docker.RestartPolicy{Name: "no"}
	})
	if err != nil {
		return nil, fmt.Errorf("docker run %s: %w", dockerImage, err)
	}
	stop := func() error { return pool.Purge(res) }
	_ = res.Expire(3600)
	hostPort := res.GetHostPort("5432/tcp")
	if host, port, err := net.SplitHostPort(hostPort); err == nil && host == "localhost" {
		hostPort = net.JoinHostPort("127.0.0.1", port)
	}
	u := (&url.URL{Scheme: "postgres", User: url.UserPassword("postgres", password), Host: hostPort,
		Path: "/postgres", RawQuery: "sslmode=disable"}).String()
	pool.MaxWait = 2 * time.Minute
	err = pool.Retry(func() error {
		if ctx.Err() != nil {
			return nil // stop waiting; reported below
		}
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		conn, err := pgx.Connect(cctx, u)
		if err != nil {
			return err
		}
		return conn.Close(cctx)
	})
	if err == nil && ctx.Err() != nil {
		err = ctx.Err()
	}
	if err != nil {
		_ = stop()
		return nil, interruptedOr(ctx, fmt.Errorf("container %s not accepting connections on %s: %w", dockerImage, hostPort, err))
	}
	return &scratchDatabase{URL: u, Kind: "docker", Address: hostPort, stop: stop}, nil
}
