package testdb

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runledger-go/runledger/goose"
)

func TestMain(m *testing.M) { Main(m) }

func TestTemplateMigrated(t *testing.T) {
	t.Parallel()
	pool := New(t)
	ctx := context.Background()
	var tables int
	err := pool.QueryRow(ctx, `
		SELECT count(*) FROM pg_tables
		WHERE schemaname = 'public' AND tablename IN ('job_replays', 'job_queue', 'job_events', 'job_definitions')`).Scan(&tables)
	if err != nil {
		t.Fatal(err)
	}
	if tables != 4 {
		t.Errorf("found %d of the 4 core tables", tables)
	}
	db, err := sql.Open("pgx", pool.Config().ConnString())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	current, latest, err := goose.Version(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	if current != latest || current == 0 {
		t.Errorf("clone at version %d, migrations at %d", current, latest)
	}

	// The template is locked down so it can always be cloned.
	var isTemplate, allowConn bool
	err = pool.QueryRow(ctx, "SELECT datistemplate, datallowconn FROM pg_database WHERE datname = $1", state.tmpl).
		Scan(&isTemplate, &allowConn)
	if err != nil {
		t.Fatal(err)
	}
	if !isTemplate || allowConn {
		t.Errorf("template %s: datistemplate=%v datallowconn=%v", state.tmpl, isTemplate, allowConn)
	}
	if !strings.HasPrefix(state.tmpl, templatePrefix) || len(state.tmpl) != len(templatePrefix)+16 {
		t.Errorf("template name %q", state.tmpl)
	}
}

func TestClonesIsolated(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, b := New(t), New(t)
	if _, err := a.Exec(ctx, "CREATE TABLE only_in_a (n int); INSERT INTO only_in_a VALUES (1)"); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Exec(ctx, "INSERT INTO job_definitions (job_type) VALUES ('isolation-probe')"); err != nil {
		t.Fatal(err)
	}
	var inB bool
	if err := b.QueryRow(ctx, "SELECT to_regclass('only_in_a') IS NOT NULL").Scan(&inB); err != nil {
		t.Fatal(err)
	}
	if inB {
		t.Error("table created in one clone is visible in another")
	}
	var dbA, dbB string
	_ = a.QueryRow(ctx, "SELECT current_database()").Scan(&dbA)
	_ = b.QueryRow(ctx, "SELECT current_database()").Scan(&dbB)
	if dbA == dbB || !strings.HasPrefix(dbA, clonePrefix) {
		t.Errorf("databases %q and %q", dbA, dbB)
	}
	var n int
	if err := b.QueryRow(ctx, "SELECT count(*) FROM job_definitions").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("clone b has %d job_definitions rows, want 0", n)
	}
}

// TestCleanupDropsDatabase checks that a clone is gone after its test, even
// with a connection left open.
func TestCleanupDropsDatabase(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var name string
	var leaked *pgx.Conn
	t.Run("user", func(t *testing.T) {
		url := NewURL(t)
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		leaked = conn // never closed: WITH (FORCE) must cope
		if err := conn.QueryRow(ctx, "SELECT current_database()").Scan(&name); err != nil {
			t.Fatal(err)
		}
	})
	if leaked != nil {
		defer leaked.Close(ctx)
	}
	admin, err := pgx.Connect(ctx, AdminURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	var exists bool
	if err := admin.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&exists); err != nil {
		t.Fatal(err)
	}
	if exists {
		t.Errorf("database %s still exists after its test", name)
	}
}

func TestNewEmpty(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := NewEmpty(t)
	db, err := sql.Open("pgx", url)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var tables int
	if err := db.QueryRowContext(ctx, "SELECT count(*) FROM pg_tables WHERE schemaname = 'public'").Scan(&tables); err != nil {
		t.Fatal(err)
	}
	if tables != 0 {
		t.Errorf("empty database has %d tables", tables)
	}
	// It is what migration tests start from.
	if err := goose.Up(ctx, db); err != nil {
		t.Fatalf("goose.Up on the empty database: %v", err)
	}
	var exists bool
	if err := db.QueryRowContext(ctx, "SELECT to_regclass('job_replays') IS NOT NULL").Scan(&exists); err != nil || !exists {
		t.Errorf("job_replays after goose.Up: %v, %v", exists, err)
	}
}

func TestParallel(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	seen := map[string]bool{}
	t.Run("group", func(t *testing.T) {
		for i := 0; i < 8; i++ {
			t.Run(fmt.Sprint(i), func(t *testing.T) {
				t.Parallel()
				pool := New(t)
				ctx := context.Background()
				var db string
				if err := pool.QueryRow(ctx, "SELECT current_database()").Scan(&db); err != nil {
					t.Fatal(err)
				}
				if _, err := pool.Exec(ctx, "CREATE TABLE mine (n int)"); err != nil {
					t.Fatal(err) // would collide if two tests shared a database
				}
				mu.Lock()
				defer mu.Unlock()
				if seen[db] {
					t.Errorf("database %s handed out twice", db)
				}
				seen[db] = true
			})
		}
	})
	if len(seen) != 8 {
		t.Errorf("%d distinct databases, want 8", len(seen))
	}
}

// TestCloneCost measures what a test pays for its database: CREATE
// DATABASE ... TEMPLATE, and the DROP at cleanup.
func TestCloneCost(t *testing.T) {
	NewURL(t) // the server and template are set up outside the measurement
	const n = 10
	var create time.Duration
	t0 := time.Now()
	for i := 0; i < n; i++ {
		t.Run("clone", func(t *testing.T) {
			c0 := time.Now()
			NewURL(t)
			create += time.Since(c0)
		})
	}
	total := time.Since(t0)
	t.Logf("per test: create %s, create+drop %s (mean of %d)", create/n, total/n, n)
	if create/n > 2*time.Second {
		t.Errorf("cloning takes %s per test", create/n)
	}
}

// scratchTemplate returns a template name no other test uses, and drops
// whatever the test leaves under it (or its build name).
func scratchTemplate(t *testing.T, adminURL string) string {
	t.Helper()
	name := templatePrefix + "test_" + RandomHex(4)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, adminURL)
		if err != nil {
			t.Error(err)
			return
		}
		defer conn.Close(ctx)
		for _, db := range []string{name, name + "_building"} {
			var exists bool
			_ = conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", db).Scan(&exists)
			if !exists {
				continue
			}
			// A template cannot be dropped until it is unmarked.
			if _, err := conn.Exec(ctx, "ALTER DATABASE "+ident(db)+" WITH IS_TEMPLATE false"); err != nil {
				t.Error(err)
			}
			if _, err := conn.Exec(ctx, "DROP DATABASE "+ident(db)+" WITH (FORCE)"); err != nil {
				t.Error(err)
			}
		}
	})
	return name
}

func adminPool(t *testing.T, adminURL string) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), adminURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// waitForLockWaiters polls pg_locks until at least n sessions wait for the
// template lock.
func waitForLockWaiters(ctx context.Context, admin *pgxpool.Pool, n int) error {
	for {
		var waiting int
		err := admin.QueryRow(ctx, `
			SELECT count(*) FROM pg_locks
			WHERE locktype = 'advisory' AND NOT granted
			  AND classid = ($1::bigint >> 32)::oid AND objid = ($1::bigint & 4294967295)::oid`,
			templateLockKey).Scan(&waiting)
		if err != nil {
			return err
		}
		if waiting >= n {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("only %d of %d builders waiting on the template lock: %w", waiting, n, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// assertTemplate checks that name is a locked-down template whose clones
// contain table.
func assertTemplate(t *testing.T, admin *pgxpool.Pool, name, table string) {
	t.Helper()
	ctx := context.Background()
	var isTemplate, allowConn bool
	if err := admin.QueryRow(ctx, "SELECT datistemplate, datallowconn FROM pg_database WHERE datname = $1", name).Scan(&isTemplate, &allowConn); err != nil {
		t.Fatalf("template %s: %v", name, err)
	}
	if !isTemplate || allowConn {
		t.Errorf("template %s: datistemplate=%v datallowconn=%v", name, isTemplate, allowConn)
	}
	if !hasTable(t, admin, name, table) {
		t.Errorf("clone of %s has no table %s", name, table)
	}
}

// hasTable clones template and reports whether the clone has table.
func hasTable(t *testing.T, admin *pgxpool.Pool, template, table string) bool {
	t.Helper()
	ctx := context.Background()
	clone := clonePrefix + RandomHex(6)
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+ident(clone)+" TEMPLATE "+ident(template)); err != nil {
		t.Fatalf("clone %s: %v", template, err)
	}
	defer func() {
		if _, err := admin.Exec(ctx, "DROP DATABASE "+ident(clone)+" WITH (FORCE)"); err != nil {
			t.Error(err)
		}
	}()
	conn, err := pgx.Connect(ctx, mustWithDatabase(admin.Config().ConnString(), clone))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", table).Scan(&exists); err != nil {
		t.Fatal(err)
	}
	return exists
}
