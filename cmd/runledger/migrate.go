package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"text/tabwriter"
	"time"

	pgoose "github.com/pressly/goose/v3"

	"github.com/runledger-go/runledger/goose"
	"github.com/runledger-go/runledger/internal/dberr"
)

const migrateNote = `The migrations are embedded in the binary (the files of schema/) and
recorded in goose's default table, goose_db_version, so the goose tool
pointed at schema/ sees the same history. A PostgreSQL advisory lock makes
concurrent runs take turns.`

var migrateUpCmd = &command{
	name:    "migrate up",
	summary: "Apply every pending migration.",
	help: `Applies the pending migrations in order, each in its own transaction; a
failing migration leaves the database at the last version that succeeded.
With nothing pending it does nothing and exits 0.

` + migrateNote + `

Output (--json):
  {"applied":[{"version":1,"source":"00001_job_ledger.sql","duration_ms":12}, ...],"version":4}
"applied" is empty when nothing was pending; "version" is the version after.`,
	setup: func(fs *flagSet) runFunc {
		return func(ctx context.Context, inv *invocation) (result, error) {
			db, err := inv.SQLDB(ctx)
			if err != nil {
				return nil, err
			}
			applied, err := goose.UpResults(ctx, db)
			if err != nil {
				return nil, migrateError(ctx, "migrate up", err)
			}
			out := migrateUpResult{Applied: []migrationApplied{}}
			for _, r := range applied {
				out.Applied = append(out.Applied, migrationApplied{
					Version:    r.Source.Version,
					Source:     path.Base(r.Source.Path),
					DurationMS: r.Duration.Milliseconds(),
				})
			}
			if out.Version, _, err = goose.Version(ctx, db); err != nil {
				return nil, migrateError(ctx, "migrate up: read version", err)
			}
			return out, nil
		}
	},
}

type migrationApplied struct {
	Version    int64  `json:"version"`
	Source     string `json:"source"`
	DurationMS int64  `json:"duration_ms"`
}

type migrateUpResult struct {
	Applied []migrationApplied `json:"applied"`
	Version int64              `json:"version"`
}

func (r migrateUpResult) text(w io.Writer) {
	if len(r.Applied) == 0 {
		fmt.Fprintf(w, "Nothing to apply: the database is at version %d.\n", r.Version)
		return
	}
	for _, m := range r.Applied {
		fmt.Fprintf(w, "Applied %s (%d ms)\n", m.Source, m.DurationMS)
	}
	fmt.Fprintf(w, "The database is at version %d.\n", r.Version)
}

var migrateDownCmd = &command{
	name:    "migrate down",
	summary: "Roll back the most recently applied migration.",
	help: `Rolls back the newest applied migration with its Down section, in one
transaction. Data in the tables it drops is lost. At version 0 there is
nothing to roll back: it says so and exits 0.

` + migrateNote + `

Output (--json):
  {"rolled_back":{"version":4,"source":"00004_job_replays.sql"},"version":3}
"rolled_back" is null at version 0; "version" is the version after.`,
	setup: func(fs *flagSet) runFunc {
		return func(ctx context.Context, inv *invocation) (result, error) {
			db, err := inv.SQLDB(ctx)
			if err != nil {
				return nil, err
			}
			res, err := goose.Down(ctx, db)
			out := migrateDownResult{}
			switch {
			case errors.Is(err, pgoose.ErrNoNextVersion):
			case err != nil:
				return nil, migrateError(ctx, "migrate down", err)
			default:
				out.RolledBack = &migrationRef{Version: res.Source.Version, Source: path.Base(res.Source.Path)}
			}
			if out.Version, _, err = goose.Version(ctx, db); err != nil {
				return nil, migrateError(ctx, "migrate down: read version", err)
			}
			return out, nil
		}
	},
}

type migrationRef struct {
	Version int64  `json:"version"`
	Source  string `json:"source"`
}

type migrateDownResult struct {
	RolledBack *migrationRef `json:"rolled_back"`
	Version    int64         `json:"version"`
}

func (r migrateDownResult) text(w io.Writer) {
	if r.RolledBack == nil {
		fmt.Fprintf(w, "Nothing to roll back: the database is at version %d.\n", r.Version)
		return
	}
	fmt.Fprintf(w, "Rolled back %s; the database is at version %d.\n", r.RolledBack.Source, r.Version)
}

var migrateStatusCmd = &command{
	name:    "migrate status",
	summary: "List every migration and whether it is applied.",
	help: migrateNote + `

Output (--json):
  {"version":4,"migrations":[{"version":1,"source":"00001_job_ledger.sql","state":"applied","applied_at":"2025-01-01T00:00:00Z"}, ...]}
"state" is "applied" or "pending"; "applied_at" is null when pending.`,
	setup: func(fs *flagSet) runFunc {
		return func(ctx context.Context, inv *invocation) (result, error) {
			db, err := inv.SQLDB(ctx)
			if err != nil {
				return nil, err
			}
			all, err := goose.StatusAll(ctx, db)
			if err != nil {
				return nil, migrateError(ctx, "migrate status", err)
			}
			out := migrateStatusResult{Migrations: []migrationStatus{}}
			for _, s := range all {
				m := migrationStatus{Version: s.Source.Version, Source: path.Base(s.Source.Path), State: string(s.State)}
				if s.State == pgoose.StateApplied {
					t := s.AppliedAt.UTC()
					m.AppliedAt = &t
				}
				out.Migrations = append(out.Migrations, m)
			}
			if out.Version, _, err = goose.Version(ctx, db); err != nil {
				return nil, migrateError(ctx, "migrate status: read version", err)
			}
			return out, nil
		}
	},
}

type migrationStatus struct {
	Version   int64      `json:"version"`
	Source    string     `json:"source"`
	State     string     `json:"state"`
	AppliedAt *time.Time `json:"applied_at"`
}

type migrateStatusResult struct {
	Version    int64             `json:"version"`
	Migrations []migrationStatus `json:"migrations"`
}

func (r migrateStatusResult) text(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "VERSION\tSTATE\tAPPLIED AT\tSOURCE")
	for _, m := range r.Migrations {
		at := "-"
		if m.AppliedAt != nil {
			at = humanTime(*m.AppliedAt)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\n", m.Version, m.State, at, m.Source)
	}
	_ = tw.Flush()
	fmt.Fprintf(w, "The database is at version %d of %d.\n", r.Version, len(r.Migrations))
}

var migrateVersionCmd = &command{
	name:    "migrate version",
	summary: "Print the database's schema version and the newest this binary knows.",
	help: `Prints the highest applied migration version (0 for a database without
the schema) and the newest version embedded in this binary.

Output (--json):
  {"version":4,"latest":4}`,
	setup: func(fs *flagSet) runFunc {
		return func(ctx context.Context, inv *invocation) (result, error) {
			db, err := inv.SQLDB(ctx)
			if err != nil {
				return nil, err
			}
			current, latest, err := goose.Version(ctx, db)
			if err != nil {
				return nil, migrateError(ctx, "migrate version", err)
			}
			return migrateVersionResult{Version: current, Latest: latest}, nil
		}
	},
}

type migrateVersionResult struct {
	Version int64 `json:"version"`
	Latest  int64 `json:"latest"`
}

func (r migrateVersionResult) text(w io.Writer) {
	switch {
	case r.Version == r.Latest:
		fmt.Fprintf(w, "The database is at version %d, the latest.\n", r.Version)
	case r.Version < r.Latest:
		fmt.Fprintf(w, "The database is at version %d; the latest is %d (run 'runledger migrate up').\n", r.Version, r.Latest)
	default:
		fmt.Fprintf(w, "The database is at version %d, newer than this binary's latest, %d.\n", r.Version, r.Latest)
	}
}

// migrateError classifies a goose failure like any database error, keeping
// goose's text in the detail.
func migrateError(ctx context.Context, op string, err error) error {
	return dberr.Translate(ctx, op, err)
}
