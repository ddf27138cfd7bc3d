package testdb

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"fmt"
	"io/fs"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
)

// templateLockKey is the session advisory lock (in the maintenance database)
// that serialises template creation among test binaries sharing a server.
// Any fixed value works; this one spells "rltmpl01".
const templateLockKey int64 = 0x726c746d706c3031

// templatePrefix starts the name of every template database testdb builds.
const templatePrefix = "runledger_tmpl_"

// migrationsHash returns the first 16 hex digits of a SHA-256 over the names
// and contents of every file in fsys, in lexical order. Any change to the
// migrations changes it, so a template built from other migrations is never
// reused.
func migrationsHash(fsys fs.FS) (string, error) {
	h := sha256.New()
	err := fs.WalkDir(fsys, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(fsys, path)
		if err != nil {
			return err
		}
		// Lengths first, so no two file sets hash the same input.
		fmt.Fprintf(h, "%d:%s%d:", len(path), path, len(b))
		h.Write(b)
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("hash migrations: %w", err)
	}
	return hex.EncodeToString(h.Sum(nil))[:16], nil
}

// ensureTemplate makes sure template database name exists, fully migrated,
// on the server at adminURL, building it with migrate if it does not. Safe
// when several processes call it at once for the same server: they take
// turns on a session advisory lock, and only the first builds.
//
// The build happens under a temporary name and is renamed only once migrate
// has succeeded, so a clone never sees a half-built template; a leftover
// from a builder that died is dropped and rebuilt. The finished template is
// marked IS_TEMPLATE and ALLOW_CONNECTIONS false: CREATE DATABASE ...
// TEMPLATE fails while anyone is connected to the template, and with
// connections refused nobody can be.
func ensureTemplate(ctx context.Context, adminURL, name string, migrate func(context.Context, *sql.DB) error) (built bool, err error) {
	// A dedicated connection, not a pool: the lock belongs to the session,
	// and closing the connection releases it even if an unlock fails.
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return false, fmt.Errorf("connect to maintenance database: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", templateLockKey); err != nil {
		return false, fmt.Errorf("template lock: %w", err)
	}

	var exists, isTemplate, allowConn bool
	err = conn.QueryRow(ctx, `
		SELECT count(*) > 0, coalesce(bool_or(datistemplate), false), coalesce(bool_or(datallowconn), false)
		FROM pg_database WHERE datname = $1`, name).Scan(&exists, &isTemplate, &allowConn)
	if err != nil {
		return false, fmt.Errorf("look up template %s: %w", name, err)
	}
	if !exists {
		if err := buildTemplate(ctx, conn, adminURL, name, migrate); err != nil {
			return false, err
		}
		built = true
	}
	// Also repairs a template renamed into place by a builder that died
	// before this statement.
	if !isTemplate || allowConn {
		if _, err := conn.Exec(ctx, "ALTER DATABASE "+ident(name)+" WITH IS_TEMPLATE true ALLOW_CONNECTIONS false"); err != nil {
			return built, fmt.Errorf("mark %s as a template: %w", name, err)
		}
	}
	return built, nil
}

// buildTemplate creates and migrates the template under a temporary name
// and renames it to name. The caller holds the template lock.
func buildTemplate(ctx context.Context, conn *pgx.Conn, adminURL, name string, migrate func(context.Context, *sql.DB) error) error {
	building := name + "_building"
	// Left by a builder that died; nobody else builds while we hold the lock.
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+ident(building)+" WITH (FORCE)"); err != nil {
		return fmt.Errorf("drop leftover %s: %w", building, err)
	}
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+ident(building)+" TEMPLATE template0"); err != nil {
		return fmt.Errorf("create %s: %w", building, err)
	}
	cfg, err := pgx.ParseConfig(mustWithDatabase(adminURL, building))
	if err != nil {
		return fmt.Errorf("connection config for %s: %w", building, err)
	}
	db := stdlib.OpenDB(*cfg)
	err = migrate(ctx, db)
	// Closed before the rename, which fails while anyone is connected
	// (PostgreSQL waits up to 5 s for closed sessions to finish exiting).
	if cerr := db.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("migrate template %s: %w", building, err)
	}
	if _, err := conn.Exec(ctx, "ALTER DATABASE "+ident(building)+" RENAME TO "+ident(name)); err != nil {
		return fmt.Errorf("rename %s to %s: %w", building, name, err)
	}
	return nil
}

// ident quotes a database name for SQL.
func ident(name string) string { return pgx.Identifier{name}.Sanitize() }

// mustWithDatabase is withDatabase for connection strings already validated.
func mustWithDatabase(connString, name string) string {
	u, err := withDatabase(connString, name)
	if err != nil {
		panic(err)
	}
	return u
}
