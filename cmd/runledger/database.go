package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/internal/dberr"
	"github.com/runledger-go/runledger/internal/errs"
	"github.com/runledger-go/runledger/internal/redact"
)

// connectTimeout bounds each connection attempt unless the URL sets
// connect_timeout itself.
const connectTimeout = 5 * time.Second

// invocation is one run of a command: its parsed arguments, where output
// goes, and the database connection, opened on first use.
type invocation struct {
	cmd         *command
	argv        []string // the whole command line, without the program name
	args        []string // positional arguments, already counted
	json        *bool
	databaseURL *string // --database-url; DATABASE_URL when empty
	stdin       io.Reader
	stdout      io.Writer
	stderr      io.Writer
	getenv      func(string) string
	redact      *redact.Redactor // hides the database password (secrets.go)

	pool  *pgxpool.Pool
	sqlDB *sql.DB
}

// asJSON reports whether --json was given.
func (inv *invocation) asJSON() bool { return *inv.json }

// URL returns the database URL from --database-url or DATABASE_URL, or a
// usage error (exit 2) when neither is set.
func (inv *invocation) URL() (string, error) {
	if u := strings.TrimSpace(*inv.databaseURL); u != "" {
		return u, nil
	}
	if u := strings.TrimSpace(inv.getenv("DATABASE_URL")); u != "" {
		return u, nil
	}
	return "", errs.Validation(codeDatabaseURLMissing,
		"no database: set DATABASE_URL or pass --database-url postgres://user:pass@host:5432/db").New("")
}

// hasURL reports whether a database is configured.
func (inv *invocation) hasURL() bool {
	_, err := inv.URL()
	return err == nil
}

// validatedCall validates req before connecting, so that an invalid request exits 2
// without a database, then runs op on the pool.
func validatedCall[R interface{ Validate() error }, T any](ctx context.Context, inv *invocation, req R, op func(context.Context, *pgxpool.Pool, R) (T, error)) (T, error) {
	var zero T
	if err := req.Validate(); err != nil {
		return zero, err
	}
	pool, err := inv.Pool(ctx)
	if err != nil {
		return zero, err
	}
	return op(ctx, pool, req)
}

// Pool returns a pool on the configured database, connecting (and
// checking the connection) on the first call. This is where a command's
// database work starts.
func (inv *invocation) Pool(ctx context.Context) (*pgxpool.Pool, error) {
	if inv.pool != nil {
		return inv.pool, nil
	}
	url, err := inv.URL()
	if err != nil {
		return nil, err
	}
	pool, err := openPool(ctx, url)
	if err != nil {
		return nil, err
	}
	inv.pool = pool
	return pool, nil
}

// SQLDB returns a database/sql handle on the configured database (for
// goose), connecting on the first call.
func (inv *invocation) SQLDB(ctx context.Context) (*sql.DB, error) {
	if inv.sqlDB != nil {
		return inv.sqlDB, nil
	}
	url, err := inv.URL()
	if err != nil {
		return nil, err
	}
	db, err := openSQL(ctx, url)
	if err != nil {
		return nil, err
	}
	inv.sqlDB = db
	return db, nil
}

func (inv *invocation) close() {
	if inv.pool != nil {
		inv.pool.Close()
	}
	if inv.sqlDB != nil {
		_ = inv.sqlDB.Close()
	}
}

// parseURL parses a database URL (or keyword/value string) and applies
// the default connect timeout. A URL that does not parse is a usage error.
func parseURL(url string) (*pgxpool.Config, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		// pgx redacts the password from its parse errors.
		return nil, errs.Validation(codeDatabaseURLInvalid, "invalid database URL: "+err.Error()).New("")
	}
	if cfg.ConnConfig.ConnectTimeout == 0 {
		cfg.ConnConfig.ConnectTimeout = connectTimeout
	}
	cfg.MaxConns = 4
	return cfg, nil
}

// openPool opens a pool on url and makes sure a connection can be made, so
// that an unreachable database is reported as such, naming the host.
func openPool(ctx context.Context, url string) (*pgxpool.Pool, error) {
	cfg, err := parseURL(url)
	if err != nil {
		return nil, err
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, connectError(ctx, &cfg.ConnConfig.Config, err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, connectError(ctx, &cfg.ConnConfig.Config, err)
	}
	return pool, nil
}

// openSQL is openPool for database/sql (pgx's stdlib driver).
func openSQL(ctx context.Context, url string) (*sql.DB, error) {
	cfg, err := parseURL(url)
	if err != nil {
		return nil, err
	}
	db := stdlib.OpenDB(*cfg.ConnConfig)
	db.SetMaxOpenConns(2)
	if err := db.PingContext(ctx); err != nil {
		_ = db.Close()
		return nil, connectError(ctx, &cfg.ConnConfig.Config, err)
	}
	return db, nil
}

// connectError turns a failed connection into a runledger error whose
// message names the server and says briefly why: "cannot reach database
// at 127.0.0.1:5999: connection refused" (code db.transient) when the
// network failed, "cannot connect to database at host:port: <server
// message>" when the server refused (authentication, unknown database).
func connectError(ctx context.Context, cfg *pgconn.Config, err error) error {
	out := &runledger.Error{}
	var e *runledger.Error
	if errors.As(dberr.Translate(ctx, "connect to database", err), &e) {
		out = e
	}
	where := serverAddress(cfg)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		out.Message = fmt.Sprintf("cannot connect to database at %s: %s (SQLSTATE %s)", where, pgErr.Message, pgErr.Code)
		out.Detail = ""
		return out
	}
	if out.Code == "" || out.Category == runledger.CategoryInternal {
		out.Code, out.Category = runledger.CodeTransient, runledger.CategoryTransient
	}
	out.Message = fmt.Sprintf("cannot reach database at %s: %s", where, connectCause(ctx, cfg, err))
	out.Detail = "" // the message says it all; pgx's text repeats it per address tried
	return out
}

// serverAddress is host:port of the first server the configuration names,
// or the socket path for a Unix socket.
func serverAddress(cfg *pgconn.Config) string {
	if strings.HasPrefix(cfg.Host, "/") {
		return fmt.Sprintf("%s/.s.PGSQL.%d", cfg.Host, cfg.Port)
	}
	return net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port)))
}

// connectCause says in a few words why a connection could not be made.
func connectCause(ctx context.Context, cfg *pgconn.Config, err error) string {
	var errno syscall.Errno
	var dnsErr *net.DNSError
	switch {
	case ctx.Err() != nil:
		return "interrupted"
	case errors.As(err, &dnsErr):
		return "cannot resolve host " + dnsErr.Name + ": " + dnsErr.Err
	case errors.As(err, &errno):
		return errno.Error()
	case errors.Is(err, context.DeadlineExceeded), pgconn.Timeout(err), isTimeout(err):
		return fmt.Sprintf("no answer within %s", cfg.ConnectTimeout)
	case errors.Is(err, os.ErrDeadlineExceeded):
		return "timed out"
	}
	// pgx joins one error per address it tried (and per TLS mode); the
	// last is the final word. Each starts with "host:port (host): ".
	var connErr *pgconn.ConnectError
	if errors.As(err, &connErr) && errors.Unwrap(connErr) != nil {
		err = errors.Unwrap(connErr)
		if joined, ok := err.(interface{ Unwrap() []error }); ok && len(joined.Unwrap()) > 0 {
			all := joined.Unwrap()
			err = all[len(all)-1]
		}
	}
	msg := oneLine(err.Error())
	if _, after, ok := strings.Cut(msg, "): "); ok {
		msg = after
	}
	return msg
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// asError returns the *runledger.Error in err's chain, or nil.
func asError(err error) *runledger.Error {
	var e *runledger.Error
	if errors.As(err, &e) {
		return e
	}
	return nil
}
