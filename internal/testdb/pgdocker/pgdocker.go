// Package pgdocker runs a throwaway PostgreSQL server in Docker through
// ory/dockertest, for test databases (internal/testdb) and for commands
// that need a scratch server on a machine without local server binaries
// (runledger demo, bench).
package pgdocker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/ory/dockertest/v3"
	"github.com/ory/dockertest/v3/docker"
)

// DefaultImage is the PostgreSQL image used when Options.Image is empty.
const DefaultImage = "postgres:15"

// Ping returns a client for the Docker daemon if one answers a ping within
// timeout.
func Ping(ctx context.Context, timeout time.Duration) (*dockertest.Pool, error) {
	pool, err := dockertest.NewPool("")
	if err != nil {
		return nil, fmt.Errorf("docker client: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := pool.Client.PingWithContext(ctx); err != nil {
		return nil, fmt.Errorf("docker ping: %w", err)
	}
	return pool, nil
}

// Options configure a container.
type Options struct {
	// Image is "repo:tag" ("host:5000/postgres:15" works); default
	// DefaultImage; no tag means latest.
	Image string
	// Settings are server settings as "name=value", passed as -c flags.
	Settings []string
	// Label marks the container (key=1) so leftovers can be found.
	Label string
	// Lifetime is how long the container may live: the daemon kills it
	// then, so a process that dies without calling Stop leaves nothing
	// running for longer. Zero means an hour.
	Lifetime time.Duration
}

// Server is a running container.
type Server struct {
	// URL connects as the postgres superuser to the postgres database.
	URL string
	// HostPort is where the server's port is published.
	HostPort string
	stop     func() error
}

// Stop removes the container. Safe to call more than once.
func (s *Server) Stop() error {
	if s.stop == nil {
		return nil
	}
	stop := s.stop
	s.stop = nil
	return stop()
}

// Start runs the image with a published port and waits (up to two minutes,
// or until ctx is done) until it accepts connections. The container
// removes itself when stopped.
func Start(ctx context.Context, pool *dockertest.Pool, opts Options) (*Server, error) {
	image := opts.Image
	if image == "" {
		image = DefaultImage
	}
	lifetime := opts.Lifetime
	if lifetime <= 0 {
		lifetime = time.Hour
	}
	repo, tag := SplitImage(image)
	secret := make([]byte, 12)
	if _, err := rand.Read(secret); err != nil {
		return nil, err
	}
	password := hex.EncodeToString(secret)
	cmd := []string{"postgres"}
	for _, kv := range opts.Settings {
		cmd = append(cmd, "-c", kv)
	}
	labels := map[string]string{}
	if opts.Label != "" {
		labels[opts.Label] = "1"
	}
	res, err := pool.RunWithOptions(&dockertest.RunOptions{
		Repository: repo, Tag: tag,
		Env:    []string{"POSTGRES_PASSWORD=" + password},
		Cmd:    cmd,
		Labels: labels,
	}, func(hc *docker.HostConfig) {
		hc.AutoRemove = true
		hc.RestartPolicy = docker.RestartPolicy{Name: "no"}
	})
	if err != nil {
		return nil, fmt.Errorf("docker run %s: %w", image, err)
	}
	srv := &Server{stop: func() error {
		if err := pool.Purge(res); err != nil {
			return fmt.Errorf("remove container %s: %w", res.Container.ID, err)
		}
		return nil
	}}
	// dockertest starts containers with stop signal SIGWINCH, which
	// PostgreSQL ignores, so Expire's "docker stop -t N" is a kill after N
	// seconds: the cleanup for a process that died first.
	_ = res.Expire(uint(lifetime.Seconds()))

	srv.HostPort = hostPort(res.GetHostPort("5432/tcp"))
	srv.URL = (&url.URL{
		Scheme: "postgres", User: url.UserPassword("postgres", password),
		Host: srv.HostPort, Path: "/postgres", RawQuery: "sslmode=disable",
	}).String()

	pool.MaxWait = 2 * time.Minute
	err = pool.Retry(func() error {
		if ctx.Err() != nil {
			return nil // stop waiting; reported below
		}
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		conn, err := pgx.Connect(cctx, srv.URL)
		if err != nil {
			return err
		}
		return conn.Close(cctx)
	})
	if err == nil {
		err = ctx.Err()
	}
	if err != nil {
		_ = srv.Stop()
		return nil, fmt.Errorf("container %s not accepting connections on %s: %w", image, srv.HostPort, err)
	}
	return srv, nil
}

// hostPort fixes the host of a published port: dockertest reports
// "localhost" for ports bound on all interfaces, which is right only when
// the daemon runs here; for a remote daemon (DOCKER_HOST=tcp://...) the
// port is on the daemon's host. Locally, 127.0.0.1 avoids an IPv6 detour.
func hostPort(published string) string {
	host, port, err := net.SplitHostPort(published)
	if err != nil || host != "localhost" {
		return published
	}
	if u, err := url.Parse(os.Getenv("DOCKER_HOST")); err == nil && u.Scheme == "tcp" && u.Hostname() != "" {
		return net.JoinHostPort(u.Hostname(), port)
	}
	return net.JoinHostPort("127.0.0.1", port)
}

// SplitImage splits "repo:tag" (the repo may contain a registry port,
// "host:5000/postgres:15"); no tag means "latest".
func SplitImage(image string) (repo, tag string) {
	i := strings.LastIndex(image, ":")
	if i < 0 || strings.Contains(image[i:], "/") {
		return image, "latest"
	}
	return image[:i], image[i+1:]
}
