// Package goose applies the runledger schema migrations (the files of
// package schema) through goose's Provider, never through goose's global
// state, so several callers in one process cannot interfere.
//
// Every entry point takes a session-level PostgreSQL advisory lock for its
// whole run (goose's session locker): two processes migrating the same
// database at once take turns instead of racing. Versions are recorded in
// goose's default table, goose_db_version, so the goose command-line tool
// pointed at the schema/ directory sees the same history.
package goose

import (
	"context"
	"database/sql"
	"fmt"

	pgoose "github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"

	"github.com/runledger-go/runledger/schema"
)

// Result describes one migration that was applied or rolled back.
type Result = pgoose.MigrationResult

// Status describes one migration and whether the database has applied it.
type Status = pgoose.MigrationStatus

// NewProvider returns a goose Provider over the embedded migrations for db,
// which must be a PostgreSQL database opened with a database/sql driver (for
// example github.com/jackc/pgx/v5/stdlib). The provider serialises runs with
// a PostgreSQL session advisory lock. Note that the Provider's Close closes
// db.
func NewProvider(db *sql.DB) (*pgoose.Provider, error) {
	// Retry every second (goose's default is 5) for up to five minutes: a
	// second migrator usually waits well under a second for the first.
	locker, err := lock.NewPostgresSessionLocker(lock.WithLockTimeout(1, 300))
	if err != nil {
		return nil, fmt.Errorf("goose: create session locker: %w", err)
	}
	p, err := pgoose.NewProvider(pgoose.DialectPostgres, db, schema.FS,
		pgoose.WithSessionLocker(locker),
	)
	if err != nil {
		return nil, fmt.Errorf("goose: create provider: %w", err)
	}
	return p, nil
}

// Up applies every pending migration in order; with nothing pending it does
// nothing and returns nil. Each migration runs in its own transaction, so a
// failing one leaves the database at the last version that succeeded.
func Up(ctx context.Context, db *sql.DB) error {
	_, err := UpResults(ctx, db)
	return err
}

// UpResults is Up, returning what it applied (empty when nothing was
// pending).
func UpResults(ctx context.Context, db *sql.DB) ([]*Result, error) {
	return withProvider(db, func(p *pgoose.Provider) ([]*Result, error) {
		return p.Up(ctx)
	})
}

// UpTo applies pending migrations up to and including version.
func UpTo(ctx context.Context, db *sql.DB, version int64) ([]*Result, error) {
	return withProvider(db, func(p *pgoose.Provider) ([]*Result, error) {
		return p.UpTo(ctx, version)
	})
}

// Down rolls back the most recently applied migration. At version 0 it
// returns an error wrapping goose's ErrNoNextVersion.
func Down(ctx context.Context, db *sql.DB) (*Result, error) {
	var res *Result
	_, err := withProvider(db, func(p *pgoose.Provider) ([]*Result, error) {
		r, err := p.Down(ctx)
		res = r
		return nil, err
	})
	return res, err
}

// DownTo rolls back applied migrations, newest first, until the database is
// at version; DownTo(ctx, db, 0) removes the whole schema. Job data in the
// dropped tables is lost.
func DownTo(ctx context.Context, db *sql.DB, version int64) ([]*Result, error) {
	return withProvider(db, func(p *pgoose.Provider) ([]*Result, error) {
		return p.DownTo(ctx, version)
	})
}

// StatusAll reports every known migration, in version order, with whether
// it is applied and when.
func StatusAll(ctx context.Context, db *sql.DB) ([]*Status, error) {
	var out []*Status
	_, err := withProvider(db, func(p *pgoose.Provider) ([]*Result, error) {
		s, err := p.Status(ctx)
		out = s
		return nil, err
	})
	return out, err
}

// Version returns the highest applied migration version, 0 for a database
// that has none, together with the newest version the embedded files know.
func Version(ctx context.Context, db *sql.DB) (current, latest int64, err error) {
	_, err = withProvider(db, func(p *pgoose.Provider) ([]*Result, error) {
		var verr error
		current, latest, verr = p.GetVersions(ctx)
		return nil, verr
	})
	return current, latest, err
}

func withProvider(db *sql.DB, run func(*pgoose.Provider) ([]*Result, error)) ([]*Result, error) {
	p, err := NewProvider(db)
	if err != nil {
		return nil, err
	}
	res, err := run(p)
	if err != nil {
		return res, fmt.Errorf("goose: %w", err)
	}
	return res, nil
}
