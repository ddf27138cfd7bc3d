package testdb

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/runledger-go/runledger/internal/testdb/pgcitus"
)

// buildCitusTemplate builds the migrated template of the Citus lane: a
// clone of the empty distributed database on every node, migrated through
// the coordinator, checked to be distributed, then made a template on
// every node (pgcitus.MakeTemplate), from which each test's database is
// cloned. The cluster belongs to this test binary alone, so unlike
// ensureTemplate no other process can be building it at the same time.
func buildCitusTemplate(ctx context.Context, c *pgcitus.Cluster, name string, migrate func(context.Context, *sql.DB) error) (err error) {
	url, err := c.CloneDatabase(ctx, name, citusEmptyTemplate)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, c.DropDatabase(context.WithoutCancel(ctx), name))
		}
	}()
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return err
	}
	db := stdlib.OpenDB(*cfg)
	err = migrate(ctx, db)
	if err == nil {
		err = checkDistributed(ctx, db)
	}
	// Closed before MakeTemplate, which would terminate it otherwise.
	if cerr := db.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("migrate template %s on Citus: %w", name, err)
	}
	return c.MakeTemplate(ctx, name)
}

// checkDistributed fails unless every table the migrations made (beside
// goose's version table) is a Citus table, distributed or reference. On
// Citus a table left local to the coordinator still works for statements
// that touch only it, so a schema that does not distribute would let the
// suites pass without testing the distributed shape: the lane refuses it.
func checkDistributed(ctx context.Context, db *sql.DB) error {
	var local sql.NullString
	err := db.QueryRowContext(ctx, `
		SELECT string_agg(format('%I.%I', n.nspname, c.relname), ', ' ORDER BY n.nspname, c.relname)
		FROM pg_class c
		JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE c.relkind IN ('r', 'p')
		  AND n.nspname NOT IN ('pg_catalog', 'information_schema')
		  AND n.nspname NOT LIKE 'pg\_%'
		  AND c.relname <> 'goose_db_version'
		  AND NOT c.relispartition
		  -- tables of extensions (Citus's own) are not the schema's
		  AND NOT EXISTS (SELECT 1 FROM pg_depend d
		                  WHERE d.classid = 'pg_class'::regclass AND d.objid = c.oid AND d.deptype = 'e')
		  AND NOT EXISTS (SELECT 1 FROM pg_dist_partition p WHERE p.logicalrelid = c.oid)`).Scan(&local)
	if err != nil {
		return fmt.Errorf("list the tables Citus does not distribute: %w", err)
	}
	if local.Valid {
		return fmt.Errorf("the migrated schema does not distribute on Citus: %s stay local to the coordinator "+
			"(every table must be distributed by organization_id or be a reference table; CONTRACT.md section 12)", local.String)
	}
	return nil
}
