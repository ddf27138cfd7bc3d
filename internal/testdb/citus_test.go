package testdb

import (
	"context"
	"database/sql"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// citusServer returns the binary's server if it is the Citus lane's
// cluster, and skips the test otherwise: these tests are about the lane.
func citusServer(t *testing.T) *server {
	t.Helper()
	srv := mustServer(t)
	if srv.citus == nil {
		t.Skipf("not the Citus lane (%s=1 runs it)", EnvCitus)
	}
	return srv
}

// scratchMigration stands in for goose: a tenant table distributed by org
// and a reference table, in one transaction as goose runs a migration.
func scratchMigration(ctx context.Context, db *sql.DB) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	for _, q := range []string{
		"SET LOCAL citus.multi_shard_modify_mode TO 'sequential'",
		"CREATE TABLE kinds (kind text PRIMARY KEY)",
		"SELECT create_reference_table('kinds')",
		"INSERT INTO kinds VALUES ('plain')",
		"CREATE TABLE notes (org uuid NOT NULL, id bigint NOT NULL, kind text NOT NULL REFERENCES kinds, body text, PRIMARY KEY (org, id))",
		"SELECT create_distributed_table('notes', 'org')",
	} {
		if _, err := tx.ExecContext(ctx, q); err != nil {
			return err
		}
	}
	return tx.Commit()
}

// TestCitusTemplateClones builds a template the way the lane builds the
// project's (migrated through the coordinator, checked, made a template on
// every node) and gives two "tests" their databases from it through
// createDatabase: each is distributed, isolated from the other, and routes
// a statement naming its tenant to one shard.
func TestCitusTemplateClones(t *testing.T) {
	srv := citusServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tmpl := "rl_citus_scratch_" + RandomHex(6)
	if err := buildCitusTemplate(ctx, srv.citus, tmpl, scratchMigration); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := srv.dropDB(context.Background(), tmpl); err != nil {
			t.Error(err)
		}
	})

	org := uuid.New()
	var conns []*pgx.Conn
	for i := range 2 {
		t0 := time.Now()
		url := createDatabase(t, srv, tmpl)
		t.Logf("database %d cloned on every node in %s", i, time.Since(t0).Round(time.Millisecond))
		conn := Connect(t, url)
		// The same tenant and id in both: only isolation keeps them apart.
		if _, err := conn.Exec(ctx, "INSERT INTO notes VALUES ($1, 1, 'plain', $2)", org, url); err != nil {
			t.Fatal(err)
		}
		conns = append(conns, conn)
	}
	for i, conn := range conns {
		var n int
		var body string
		if err := conn.QueryRow(ctx, "SELECT count(*) OVER (), body FROM notes WHERE org = $1", org).Scan(&n, &body); err != nil {
			t.Fatal(err)
		}
		if n != 1 || body != conn.Config().ConnString() {
			t.Errorf("database %d: %d rows, body %q; want its own row only", i, n, body)
		}
		rows, err := conn.Query(ctx, "EXPLAIN SELECT body FROM notes WHERE org = $1", org)
		if err != nil {
			t.Fatal(err)
		}
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		if plan := strings.Join(lines, "\n"); !strings.Contains(plan, "Task Count: 1\n") {
			t.Errorf("database %d: not routed to one shard:\n%s", i, plan)
		}
		var partitioned int
		if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_dist_partition WHERE logicalrelid IN ('notes'::regclass, 'kinds'::regclass)").Scan(&partitioned); err != nil || partitioned != 2 {
			t.Errorf("database %d: %d of notes and kinds are Citus tables (%v), want 2", i, partitioned, err)
		}
	}
}

// TestCitusTemplateRefusesLocalTables checks the lane's guard: a migration
// that leaves a table local to the coordinator fails the template build,
// naming the table, and leaves no database behind on any node.
func TestCitusTemplateRefusesLocalTables(t *testing.T) {
	srv := citusServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tmpl := "rl_citus_scratch_" + RandomHex(6)
	err := buildCitusTemplate(ctx, srv.citus, tmpl, func(ctx context.Context, db *sql.DB) error {
		if err := scratchMigration(ctx, db); err != nil {
			return err
		}
		_, err := db.ExecContext(ctx, "CREATE TABLE stays_local (id bigint PRIMARY KEY)")
		return err
	})
	if err == nil || !strings.Contains(err.Error(), "public.stays_local") || strings.Contains(err.Error(), "notes") {
		t.Fatalf("err = %v; want one naming public.stays_local only", err)
	}
	for i, u := range srv.citus.NodeURLs("postgres") {
		var n int
		if err := Connect(t, u).QueryRow(ctx, "SELECT count(*) FROM pg_database WHERE datname = $1", tmpl).Scan(&n); err != nil || n != 0 {
			t.Errorf("node %d: %d databases named %s left (%v)", i, n, tmpl, err)
		}
	}
}

// TestCitusNewEmpty checks that an empty database of the lane is ready to
// distribute: the extension and all three nodes, no tables.
func TestCitusNewEmpty(t *testing.T) {
	t.Parallel()
	citusServer(t)
	conn := Connect(t, NewEmpty(t))
	var nodes, tables int
	err := conn.QueryRow(context.Background(), `
		SELECT (SELECT count(*) FROM pg_dist_node WHERE isactive),
		       (SELECT count(*) FROM pg_tables WHERE schemaname = 'public')`).Scan(&nodes, &tables)
	if err != nil {
		t.Fatal(err)
	}
	if nodes != 3 || tables != 0 {
		t.Errorf("%d active nodes and %d tables; want 3 and 0", nodes, tables)
	}
	if _, err := conn.Exec(context.Background(), "CREATE TABLE t (org uuid PRIMARY KEY); SELECT create_distributed_table('t', 'org')"); err != nil {
		t.Fatal(err)
	}
}
