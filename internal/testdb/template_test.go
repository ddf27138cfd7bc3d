package testdb

import (
	"context"
	"database/sql"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/fstest"
	"time"
)

func TestMigrationsHash(t *testing.T) {
	t.Parallel()
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
