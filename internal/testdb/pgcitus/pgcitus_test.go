package pgcitus

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// The package's tests share one cluster, started on first use and stopped
// by TestMain.
var shared struct {
	once    sync.Once
	cluster *Cluster
	err     error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if shared.cluster != nil {
		if err := shared.cluster.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			if code == 0 {
				code = 1
			}
		}
	}
	os.Exit(code)
}

// cluster returns the shared cluster. The tests run only in the Citus lane
// (RUNLEDGER_TEST_CITUS=1, as `make test-citus` sets it); elsewhere they
// skip, saying so. In the lane, a cluster that cannot start fails them.
func cluster(t testing.TB) *Cluster {
	t.Helper()
	if os.Getenv(EnvCitus) != "1" {
		t.Skipf("the Citus lane is off: run `make test-citus`, or set %s=1 (with RUNLEDGER_PG_BINDIR=$(tools/citus), or unset to let the tests run tools/citus)", EnvCitus)
	}
	shared.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		binDir, err := BinDir(ctx)
		if err != nil {
			shared.err = err
			return
		}
		shared.cluster, shared.err = Start(ctx, Options{BinDir: binDir, Logf: logf})
	})
	if shared.err != nil {
		t.Fatal(shared.err)
	}
	return shared.cluster
}

// logf reports the cluster's progress under go test -v.
func logf(format string, args ...any) {
	if testing.Verbose() {
		fmt.Fprintf(os.Stderr, format+"\n", args...)
	}
}

func uniqueName(prefix string) string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

func connect(t testing.TB, url string) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("connect %s: %v", url, err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

func mustExec(t testing.TB, conn *pgx.Conn, sql string, args ...any) {
	t.Helper()
	if _, err := conn.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func scalar[T any](t testing.TB, conn *pgx.Conn, sql string, args ...any) T {
	t.Helper()
	var v T
	if err := conn.QueryRow(context.Background(), sql, args...).Scan(&v); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return v
}

// dropAtCleanup drops database name from every node when the test ends.
func dropAtCleanup(t testing.TB, c *Cluster, name string) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := c.DropDatabase(ctx, name); err != nil {
			t.Errorf("drop %s: %v", name, err)
		}
	})
}

// scratchSchema is a small tenant-distributed schema (not the project's):
// a reference table, a table distributed by org and a colocated child with
// a foreign key led by org. Each table is distributed before a table that
// references it is created: Citus refuses to distribute a table that a
// local table still references.
const scratchSchema = `
CREATE TABLE kinds (kind text PRIMARY KEY);
SELECT create_reference_table('kinds');
CREATE TABLE items (
	org  uuid   NOT NULL,
	id   bigint NOT NULL,
	kind text   NOT NULL REFERENCES kinds,
	note text   NOT NULL,
	PRIMARY KEY (org, id)
);
SELECT create_distributed_table('items', 'org');
CREATE TABLE item_events (
	org     uuid   NOT NULL,
	item_id bigint NOT NULL,
	seq     int    NOT NULL,
	PRIMARY KEY (org, item_id, seq),
	FOREIGN KEY (org, item_id) REFERENCES items (org, id)
);
SELECT create_distributed_table('item_events', 'org', colocate_with => 'items');
INSERT INTO kinds VALUES ('plain');
`

// distributedTemplate creates a template holding scratchSchema and one
// item of org templateOrg, and drops it when the test ends.
func distributedTemplate(t testing.TB, c *Cluster, templateOrg uuid.UUID) string {
	t.Helper()
	ctx := context.Background()
	name := uniqueName("pgc_tmpl_")
	url, err := c.CreateDatabase(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	dropAtCleanup(t, c, name)
	conn := connect(t, url)
	// Sequential, as a migration in one transaction would need.
	mustExec(t, conn, "SET citus.multi_shard_modify_mode TO 'sequential'")
	mustExec(t, conn, scratchSchema)
	mustExec(t, conn, "INSERT INTO items VALUES ($1, 1, 'plain', 'template')", templateOrg)
	if err := conn.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.MakeTemplate(ctx, name); err != nil {
		t.Fatal(err)
	}
	return name
}

// TestCloneIsolated is the proof behind CloneDatabase: a template with
// distributed tables, cloned twice, gives two distributed databases whose
// metadata is complete on every node, whose shards live on the workers,
// and whose rows never mix.
func TestCloneIsolated(t *testing.T) {
	c := cluster(t)
	ctx := context.Background()
	templateOrg := uuid.New()
	tmpl := distributedTemplate(t, c, templateOrg)

	type clone struct {
		name string
		conn *pgx.Conn
		orgs []uuid.UUID
	}
	clones := make([]*clone, 2)
	for i := range clones {
		name := uniqueName("pgc_clone_")
		url, err := c.CloneDatabase(ctx, name, tmpl)
		if err != nil {
			t.Fatal(err)
		}
		dropAtCleanup(t, c, name)
		clones[i] = &clone{name: name, conn: connect(t, url)}
	}

	// Different tenants and notes in each clone, through the coordinator;
	// one transaction per clone that touches several shards (two-phase
	// commit across the workers).
	for i, cl := range clones {
		tx, err := cl.conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for j := range 20 {
			org := uuid.New()
			cl.orgs = append(cl.orgs, org)
			if _, err := tx.Exec(ctx, "INSERT INTO items VALUES ($1, $2, 'plain', $3)", org, j, cl.name); err != nil {
				t.Fatal(err)
			}
			if _, err := tx.Exec(ctx, "INSERT INTO item_events VALUES ($1, $2, 1)", org, j); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := tx.Exec(ctx, "UPDATE items SET note = note || '!' WHERE org <> $1", templateOrg); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatalf("clone %d: commit across the workers: %v", i, err)
		}
	}

	for _, cl := range clones {
		// Each clone holds the template's row and its own 20, never the
		// other clone's.
		if got := scalar[int](t, cl.conn, "SELECT count(*) FROM items WHERE note = $1", cl.name+"!"); got != 20 {
			t.Errorf("%s: %d own items, want 20", cl.name, got)
		}
		if got := scalar[int](t, cl.conn, "SELECT count(*) FROM items"); got != 21 {
			t.Errorf("%s: %d items in all, want 21 (the template's and its own 20)", cl.name, got)
		}
		if got := scalar[string](t, cl.conn, "SELECT note FROM items WHERE org = $1", templateOrg); got != "template" {
			t.Errorf("%s: template row has note %q", cl.name, got)
		}
		if got := scalar[int](t, cl.conn, "SELECT count(*) FROM item_events"); got != 20 {
			t.Errorf("%s: %d events, want 20", cl.name, got)
		}
		// Reading back one tenant's row is routed to one shard.
		org := cl.orgs[7]
		if got := scalar[string](t, cl.conn, "SELECT note FROM items WHERE org = $1 AND id = 7", org); got != cl.name+"!" {
			t.Errorf("%s: item 7 has note %q", cl.name, got)
		}
		if plan := explain(t, cl.conn, "SELECT note FROM items WHERE org = $1", org); !strings.Contains(plan, "Task Count: 1\n") {
			t.Errorf("%s: the query on the distribution column is not routed to one shard:\n%s", cl.name, plan)
		}
		if plan := explain(t, cl.conn, "SELECT note FROM items WHERE id = 7"); !strings.Contains(plan, "Task Count: 32\n") {
			t.Errorf("%s: a query without the distribution column should fan out to all 32 shards:\n%s", cl.name, plan)
		}
		checkNodes(t, c, cl.name, "items")
	}

	// The template itself is unchanged: cloning it again gives only its row.
	third := uniqueName("pgc_clone_")
	url, err := c.CloneDatabase(ctx, third, tmpl)
	if err != nil {
		t.Fatal(err)
	}
	dropAtCleanup(t, c, third)
	if got := scalar[int](t, connect(t, url), "SELECT count(*) FROM items"); got != 1 {
		t.Errorf("a later clone of the template has %d items, want 1", got)
	}
}

// explain returns the EXPLAIN text of a query.
func explain(t testing.TB, conn *pgx.Conn, query string, args ...any) string {
	t.Helper()
	rows, err := conn.Query(context.Background(), "EXPLAIN "+query, args...)
	if err != nil {
		t.Fatalf("EXPLAIN %s: %v", query, err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatalf("EXPLAIN %s: %v", query, err)
	}
	return strings.Join(lines, "\n") + "\n"
}

// checkNodes verifies that database name is a complete distributed database
// on every node: the same Citus metadata on the coordinator and the
// workers, every node reachable from every other in this database, all
// shards placed on the workers, and the rows physically there.
func checkNodes(t *testing.T, c *Cluster, name, table string) {
	t.Helper()
	urls := c.NodeURLs(name)
	coord := connect(t, urls[0])
	want := scalar[string](t, coord, metadataSummary)
	if got := scalar[int](t, coord, "SELECT count(*) FROM pg_dist_node"); got != 3 {
		t.Errorf("%s: %d nodes registered, want 3", name, got)
	}
	if bad := scalar[int](t, coord, "SELECT count(*) FROM citus_check_cluster_node_health() WHERE result IS DISTINCT FROM true"); bad != 0 {
		t.Errorf("%s: %d node pairs cannot reach each other in this database", name, bad)
	}
	// Reference tables have a copy on every node, the coordinator included;
	// distributed tables' shards are only on the workers.
	if got := scalar[int](t, coord, "SELECT count(*) FROM citus_shards WHERE nodeport = $1 AND citus_table_type = 'distributed'", c.Coordinator().Port()); got != 0 {
		t.Errorf("%s: %d shards of distributed tables on the coordinator, want none", name, got)
	}
	var shardRows int
	for i, url := range urls[1:] {
		w := connect(t, url)
		if got := scalar[string](t, w, metadataSummary); got != want {
			t.Errorf("%s: worker %d metadata\n%s\ndiffers from the coordinator's\n%s", name, i, got, want)
		}
		// Count the rows in the shards this worker holds, read as local
		// tables (not through Citus's routing).
		rows, err := w.Query(context.Background(), `
			SELECT shard_name FROM citus_shards
			WHERE nodeport = $1 AND table_name = $2::regclass`, c.Workers()[i].Port(), table)
		if err != nil {
			t.Fatal(err)
		}
		shards, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		if len(shards) == 0 {
			t.Errorf("%s: worker %d holds no shard of %s", name, i, table)
		}
		for _, s := range shards {
			shardRows += scalar[int](t, w, "SELECT count(*) FROM "+pgx.Identifier{s}.Sanitize())
		}
	}
	if got := scalar[int](t, coord, "SELECT count(*) FROM "+pgx.Identifier{table}.Sanitize()); got != shardRows {
		t.Errorf("%s: %d rows of %s through the coordinator, %d in the workers' shards", name, got, table, shardRows)
	}
}

// metadataSummary is one text of a node's Citus metadata for the tables of
// the scratch schema: each table's kind and colocation, its shards and
// their placements.
const metadataSummary = `
SELECT string_agg(format('%s %s %s %s %s', p.logicalrelid, p.partmethod, p.colocationid, s.shardid, n.nodeport), E'\n'
                  ORDER BY p.logicalrelid::text, s.shardid, n.nodeport)
FROM pg_dist_partition p
JOIN pg_dist_shard s USING (logicalrelid)
JOIN pg_dist_placement pl USING (shardid)
JOIN pg_dist_node n USING (groupid)`

// TestCreateDatabase checks the slow path: a database made from nothing on
// every node has the extension and the nodes, distributes a table, and is
// gone from every node after DropDatabase.
func TestCreateDatabase(t *testing.T) {
	c := cluster(t)
	ctx := context.Background()
	name := uniqueName("pgc_fresh_")
	url, err := c.CreateDatabase(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	dropAtCleanup(t, c, name)
	conn := connect(t, url)
	if got := scalar[int](t, conn, "SELECT count(*) FROM pg_dist_node WHERE isactive"); got != 3 {
		t.Errorf("%d active nodes, want 3", got)
	}
	mustExec(t, conn, "CREATE TABLE t (org uuid PRIMARY KEY)")
	mustExec(t, conn, "SELECT create_distributed_table('t', 'org')")
	mustExec(t, conn, "INSERT INTO t VALUES ($1)", uuid.New())
	checkNodes(t, c, name, "t")

	if err := conn.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.DropDatabase(ctx, name); err != nil {
		t.Fatal(err)
	}
	for i, u := range c.NodeURLs("postgres") {
		if n := scalar[int](t, connect(t, u), "SELECT count(*) FROM pg_database WHERE datname = $1", name); n != 0 {
			t.Errorf("node %d still has %s", i, name)
		}
	}
}

// TestMaintenanceDaemonBlocksCloning shows why MakeTemplate terminates
// sessions: Citus's maintenance daemon stays connected to every database
// that has the extension, on every node, which would make CREATE DATABASE
// ... TEMPLATE fail; after MakeTemplate no session is left anywhere.
func TestMaintenanceDaemonBlocksCloning(t *testing.T) {
	c := cluster(t)
	ctx := context.Background()
	name := uniqueName("pgc_tmpl_")
	url, err := c.CreateDatabase(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	dropAtCleanup(t, c, name)
	conn := connect(t, url)
	mustExec(t, conn, "SELECT 1")
	if err := conn.Close(ctx); err != nil {
		t.Fatal(err)
	}
	admins := make([]*pgx.Conn, 0, 3)
	for _, u := range c.NodeURLs("postgres") {
		admins = append(admins, connect(t, u))
	}
	const daemons = `SELECT count(*) FROM pg_stat_activity WHERE datname = $1 AND backend_type LIKE 'Citus Maintenance Daemon%'`
	for i, a := range admins {
		deadline := time.Now().Add(10 * time.Second)
		for scalar[int](t, a, daemons, name) == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("node %d: no maintenance daemon connected to %s", i, name)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	if err := c.MakeTemplate(ctx, name); err != nil {
		t.Fatal(err)
	}
	for i, a := range admins {
		if n := scalar[int](t, a, "SELECT count(*) FROM pg_stat_activity WHERE datname = $1", name); n != 0 {
			t.Errorf("node %d: %d sessions left in the template", i, n)
		}
		if ok := scalar[bool](t, a, "SELECT datistemplate AND NOT datallowconn FROM pg_database WHERE datname = $1", name); !ok {
			t.Errorf("node %d: %s is not a template refusing connections", i, name)
		}
	}
	clone := uniqueName("pgc_clone_")
	if _, err := c.CloneDatabase(ctx, clone, name); err != nil {
		t.Fatal(err)
	}
	dropAtCleanup(t, c, clone)
}

// TestShardMoves checks that the cluster's settings let Citus move data
// online, as scaling out needs: a shard moves from one worker to the other
// (logical replication, wal_level=logical), and a tenant is isolated to a
// shard of its own (a shard split, which decodes with Citus's own output
// plugin). The tenant's rows stay readable, routed to one shard.
func TestShardMoves(t *testing.T) {
	c := cluster(t)
	ctx := context.Background()
	name := uniqueName("pgc_move_")
	url, err := c.CreateDatabase(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	dropAtCleanup(t, c, name)
	conn := connect(t, url)
	mustExec(t, conn, "SET citus.shard_count TO 4")
	mustExec(t, conn, scratchSchema)
	hot := uuid.New()
	mustExec(t, conn, "INSERT INTO items SELECT $1, g, 'plain', 'hot' FROM generate_series(1, 50) g", hot)
	mustExec(t, conn, "INSERT INTO items SELECT gen_random_uuid(), g, 'plain', 'other' FROM generate_series(1, 50) g")

	from, to := c.Workers()[0].Port(), c.Workers()[1].Port()
	shard := scalar[int64](t, conn, "SELECT shardid FROM citus_shards WHERE table_name = 'items'::regclass AND nodeport = $1 ORDER BY shardid LIMIT 1", from)
	mustExec(t, conn, "SELECT citus_move_shard_placement($1, $2, $3, $2, $4)", shard, host, from, to)
	if got := scalar[int](t, conn, "SELECT nodeport FROM citus_shards WHERE shardid = $1", shard); got != to {
		t.Errorf("shard %d is on port %d after the move, want %d", shard, got, to)
	}

	before := scalar[int](t, conn, "SELECT count(*) FROM citus_shards WHERE table_name = 'items'::regclass")
	own := scalar[int64](t, conn, "SELECT isolate_tenant_to_new_shard('items', $1::uuid, 'CASCADE')", hot)
	if got := scalar[int](t, conn, "SELECT count(*) FROM citus_shards WHERE table_name = 'items'::regclass"); got != before+2 {
		t.Errorf("%d shards of items after isolating a tenant, want %d (its shard split in three)", got, before+2)
	}
	if got := scalar[int](t, conn, "SELECT count(*) FROM items WHERE org = $1", hot); got != 50 {
		t.Errorf("the isolated tenant has %d rows, want 50", got)
	}
	if got := scalar[int](t, conn, "SELECT count(*) FROM items"); got != 100 {
		t.Errorf("%d rows after the moves, want 100", got)
	}
	if got := scalar[int64](t, conn, "SELECT get_shard_id_for_distribution_column('items', $1::uuid)", hot); got != own {
		t.Errorf("the tenant maps to shard %d, want its own %d", got, own)
	}
	if plan := explain(t, conn, "SELECT note FROM items WHERE org = $1", hot); !strings.Contains(plan, "Task Count: 1\n") {
		t.Errorf("the isolated tenant's query is not routed to one shard:\n%s", plan)
	}
}

// BenchmarkCloneDatabase measures one test database by cloning: the clone
// on every node, then its drop, from a template of eight colocated
// distributed tables and a reference table (about the size of the
// project's schema), with Citus's default of 32 shards per table and with
// fewer. The shard count dominates: each worker copies every shard.
func BenchmarkCloneDatabase(b *testing.B) {
	c := cluster(b)
	ctx := context.Background()
	for _, shards := range []int{32, 8, 4} {
		b.Run(fmt.Sprintf("shards=%d", shards), func(b *testing.B) {
			tmpl := benchTemplate(b, c, shards)
			for b.Loop() {
				name := uniqueName("pgc_bench_")
				if _, err := c.CloneDatabase(ctx, name, tmpl); err != nil {
					b.Fatal(err)
				}
				if err := c.DropDatabase(ctx, name); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkCreateDatabase measures one test database made from nothing and
// given the same tables as BenchmarkCloneDatabase's template (what a test
// would pay without cloning), then dropped.
func BenchmarkCreateDatabase(b *testing.B) {
	c := cluster(b)
	ctx := context.Background()
	for _, shards := range []int{32, 4} {
		b.Run(fmt.Sprintf("shards=%d", shards), func(b *testing.B) {
			for b.Loop() {
				name := uniqueName("pgc_bench_")
				url, err := c.CreateDatabase(ctx, name)
				if err != nil {
					b.Fatal(err)
				}
				conn, err := pgx.Connect(ctx, url)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := conn.Exec(ctx, benchSchema(shards)); err != nil {
					b.Fatal(err)
				}
				_ = conn.Close(ctx)
				if err := c.DropDatabase(ctx, name); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// benchSchema has a reference table and eight tables distributed by org
// into shards shards each, colocated with the first.
func benchSchema(shards int) string {
	var sb strings.Builder
	sb.WriteString("SET citus.multi_shard_modify_mode TO 'sequential';\n")
	fmt.Fprintf(&sb, "SET citus.shard_count TO %d;\n", shards)
	sb.WriteString("CREATE TABLE kinds (kind text PRIMARY KEY); SELECT create_reference_table('kinds');\n")
	for i := range 8 {
		fmt.Fprintf(&sb, "CREATE TABLE t%d (org uuid NOT NULL, id bigint NOT NULL, kind text REFERENCES kinds, body jsonb, PRIMARY KEY (org, id));\n", i)
		colocate := ""
		if i > 0 {
			colocate = ", colocate_with => 't0'"
		}
		fmt.Fprintf(&sb, "SELECT create_distributed_table('t%d', 'org'%s);\n", i, colocate)
	}
	return sb.String()
}

func benchTemplate(b testing.TB, c *Cluster, shards int) string {
	b.Helper()
	ctx := context.Background()
	name := uniqueName("pgc_tmpl_")
	url, err := c.CreateDatabase(ctx, name)
	if err != nil {
		b.Fatal(err)
	}
	dropAtCleanup(b, c, name)
	conn := connect(b, url)
	mustExec(b, conn, benchSchema(shards))
	if err := conn.Close(ctx); err != nil {
		b.Fatal(err)
	}
	if err := c.MakeTemplate(ctx, name); err != nil {
		b.Fatal(err)
	}
	return name
}
