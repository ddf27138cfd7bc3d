package testdb

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/fstest"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runledger-go/runledger/goose"
	"github.com/runledger-go/runledger/internal/testdb/pgtemp"
)

func TestMain(m *testing.M) { Main(m) }

func TestChooseServer(t *testing.T) {
	errDocker := errors.New("docker: no daemon")
	errLocal := errors.New("no binaries")
	cases := []struct {
		name          string
		url           string
		docker, local error
		want          string
		wantDocker    int // probes expected to run
		wantLocal     int
	}{
		{"url wins over everything", "postgres://x", nil, nil, kindURL, 0, 0},
		{"docker when it answers", "", nil, nil, kindDocker, 1, 0},
		{"local when docker does not answer", "", errDocker, nil, kindLocal, 1, 1},
		{"nothing", "", errDocker, errLocal, "", 1, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var dockerCalls, localCalls int
			got, err := chooseServer(
				func(k string) string {
					if k == EnvURL {
						return c.url
					}
					return ""
				},
				func() error { dockerCalls++; return c.docker },
				func() error { localCalls++; return c.local },
			)
			if got != c.want {
				t.Errorf("kind = %q, want %q", got, c.want)
			}
			if (err != nil) != (c.want == "") {
				t.Errorf("err = %v", err)
			}
			if dockerCalls != c.wantDocker || localCalls != c.wantLocal {
				t.Errorf("probes run: docker %d, local %d; want %d, %d", dockerCalls, localCalls, c.wantDocker, c.wantLocal)
			}
		})
	}
}

// TestNoServerMessage checks that the failure names every way out.
func TestNoServerMessage(t *testing.T) {
	_, err := chooseServer(func(string) string { return "" },
		func() error { return errors.New("dial unix /var/run/docker.sock: connect: no such file or directory") },
		func() error { _, err := pgtemp.FindBinDir(t.TempDir()); return err })
	if !errors.Is(err, errNoServer) {
		t.Fatalf("err = %v, want errNoServer", err)
	}
	for _, want := range []string{EnvURL, "Docker", "docker.sock", "apt-get install postgresql", "initdb"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("message does not mention %q:\n%v", want, err)
		}
	}
}

// TestChooseServerObservedHere runs the real probes on this machine. Where
// no Docker daemon answers (the development machine this was written on has
// the CLI but no daemon), the choice must fall through to local binaries.
func TestChooseServerObservedHere(t *testing.T) {
	ctx := context.Background()
	_, dockerErr := dockerPing(ctx)
	_, localErr := pgtemp.FindBinDir("")
	t.Logf("docker ping: %v; local binaries: %v", dockerErr, localErr)
	kind, err := chooseServer(func(string) string { return "" },
		func() error { _, err := dockerPing(ctx); return err },
		func() error { _, err := pgtemp.FindBinDir(""); return err })
	switch {
	case dockerErr == nil:
		if kind != kindDocker {
			t.Errorf("docker answered, but chose %q (%v)", kind, err)
		}
	case localErr == nil:
		if kind != kindLocal {
			t.Errorf("docker unavailable (%v) and binaries present, but chose %q (%v)", dockerErr, kind, err)
		}
	default:
		if !errors.Is(err, errNoServer) {
			t.Errorf("nothing available, but chose %q (%v)", kind, err)
		}
	}

	// The server this binary actually uses is the one chosen (or the URL).
	if os.Getenv(EnvURL) != "" {
		kind = kindURL
	}
	AdminURL(t) // sets the server up if no test has yet
	state.mu.Lock()
	got := state.srv.kind
	state.mu.Unlock()
	if got != kind {
		t.Errorf("server in use is %q, want %q", got, kind)
	}
}

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

func TestMigrationsHash(t *testing.T) {
	fsys := fstest.MapFS{
		"00001_a.sql": {Data: []byte("CREATE TABLE a ();")},
		"00002_b.sql": {Data: []byte("CREATE TABLE b ();")},
	}
	h1, err := migrationsHash(fsys)
	if err != nil {
		t.Fatal(err)
	}
	if h2, _ := migrationsHash(fsys); h2 != h1 || len(h1) != 16 {
		t.Errorf("hash %q then %q", h1, h2)
	}
	fsys["00002_b.sql"] = &fstest.MapFile{Data: []byte("CREATE TABLE b (x int);")}
	if h3, _ := migrationsHash(fsys); h3 == h1 {
		t.Error("content change did not change the hash")
	}
	renamed := fstest.MapFS{
		"00001_a.sql": {Data: []byte("CREATE TABLE a ();")},
		"00003_b.sql": {Data: []byte("CREATE TABLE b ();")},
	}
	if h4, _ := migrationsHash(renamed); h4 == h1 {
		t.Error("rename did not change the hash")
	}
}

// TestEnsureTemplateConcurrent plays several test binaries building the same
// template at once: exactly one migrates, the others wait on the lock and
// reuse its result.
func TestEnsureTemplateConcurrent(t *testing.T) {
	adminURL := AdminURL(t)
	name := scratchTemplate(t, adminURL)
	admin := adminPool(t, adminURL)
	const builders = 4

	var migrations atomic.Int32
	migrate := func(ctx context.Context, db *sql.DB) error {
		migrations.Add(1)
		// Hold the lock until every other builder is queued behind it, so
		// the test really exercises the serialisation.
		if err := waitForLockWaiters(ctx, admin, builders-1); err != nil {
			return err
		}
		_, err := db.ExecContext(ctx, "CREATE TABLE marker (n int)")
		return err
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	var built atomic.Int32
	errs := make(chan error, builders)
	for i := 0; i < builders; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b, err := ensureTemplate(ctx, adminURL, name, migrate)
			if b {
				built.Add(1)
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	if migrations.Load() != 1 || built.Load() != 1 {
		t.Errorf("migrated %d times, built reported %d times; want 1 and 1", migrations.Load(), built.Load())
	}
	assertTemplate(t, admin, name, "marker")
}

// TestEnsureTemplateRecovers checks that a failed build leaves no template
// behind, and that the next attempt replaces the half-built leftover.
func TestEnsureTemplateRecovers(t *testing.T) {
	adminURL := AdminURL(t)
	name := scratchTemplate(t, adminURL)
	admin := adminPool(t, adminURL)
	ctx := context.Background()

	boom := errors.New("boom")
	_, err := ensureTemplate(ctx, adminURL, name, func(ctx context.Context, db *sql.DB) error {
		if _, err := db.ExecContext(ctx, "CREATE TABLE junk (n int)"); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("err = %v, want boom", err)
	}
	var exists bool
	if err := admin.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&exists); err != nil {
		t.Fatal(err)
	}
	if exists {
		t.Fatal("a failed build left a template under the final name")
	}

	built, err := ensureTemplate(ctx, adminURL, name, func(ctx context.Context, db *sql.DB) error {
		_, err := db.ExecContext(ctx, "CREATE TABLE marker (n int)")
		return err
	})
	if err != nil || !built {
		t.Fatalf("rebuild: built=%v err=%v", built, err)
	}
	assertTemplate(t, admin, name, "marker")
	if hasTable(t, admin, name, "junk") {
		t.Error("the rebuilt template kept the failed build's table")
	}
}

func TestWithDatabase(t *testing.T) {
	cases := []struct{ in, want string }{
		{"postgres://u:p@h:5432/postgres?sslmode=disable", "postgres://u:p@h:5432/rl_test_x?sslmode=disable"},
		{"postgresql://h/", "postgresql://h/rl_test_x"},
		{"host=h user=u dbname=postgres", "host=h user=u dbname=postgres dbname='rl_test_x'"},
	}
	for _, c := range cases {
		got, err := withDatabase(c.in, "rl_test_x")
		if err != nil || got != c.want {
			t.Errorf("withDatabase(%q) = %q, %v; want %q", c.in, got, err, c.want)
			continue
		}
		cfg, err := pgx.ParseConfig(got)
		if err != nil || cfg.Database != "rl_test_x" {
			t.Errorf("%q parses to database %q (%v)", got, cfg.Database, err)
		}
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
