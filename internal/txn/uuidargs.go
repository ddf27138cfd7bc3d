package txn

import (
	"context"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/runledger-go/runledger/db"
)

// The generated statements take and return github.com/google/uuid values,
// which pgx handles only as driver.Valuer and sql.Scanner: through their
// text form, after a failed binary attempt that formats an error (a large
// share of the client's CPU per replay), and a []uuid.UUID not at all
// when the exec mode gives pgx no parameter types (QueryExecModeExec, the
// simple protocol). uuidArgs and uuidRow hand pgx pgtype.UUID values
// instead, which it encodes and decodes in binary or text as the mode
// needs: the same values on the wire, cheaper. The caller's connection and
// type map are untouched.

// uuidArgs returns args with every uuid.UUID, *uuid.UUID and []uuid.UUID
// replaced by the equivalent pgtype.UUID or []pgtype.UUID (a nil pointer
// or slice by NULL). args is modified in place and returned.
func uuidArgs(args []any) []any {
	for i, a := range args {
		switch v := a.(type) {
		case uuid.UUID:
			args[i] = pgtype.UUID{Bytes: v, Valid: true}
		case *uuid.UUID:
			if v == nil {
				args[i] = pgtype.UUID{}
			} else {
				args[i] = pgtype.UUID{Bytes: *v, Valid: true}
			}
		case []uuid.UUID:
			if v == nil {
				args[i] = []pgtype.UUID(nil)
				continue
			}
			ids := make([]pgtype.UUID, len(v))
			for k, id := range v {
				ids[k] = pgtype.UUID{Bytes: id, Valid: true}
			}
			args[i] = ids
		}
	}
	return args
}

// uuidRow scans into *uuid.UUID and **uuid.UUID destinations through
// pgtype.UUID.
type uuidRow struct{ pgx.Row }

func (r uuidRow) Scan(dest ...any) error {
	type fix struct {
		tmp  *pgtype.UUID
		val  *uuid.UUID
		null **uuid.UUID
	}
	var fixes []fix
	for i, d := range dest {
		switch v := d.(type) {
		case *uuid.UUID:
			f := fix{tmp: new(pgtype.UUID), val: v}
			dest[i] = f.tmp
			fixes = append(fixes, f)
		case **uuid.UUID:
			f := fix{tmp: new(pgtype.UUID), null: v}
			dest[i] = f.tmp
			fixes = append(fixes, f)
		}
	}
	if err := r.Row.Scan(dest...); err != nil {
		return err
	}
	for _, f := range fixes {
		switch {
		case f.val != nil:
			if !f.tmp.Valid {
				return errNullUUID
			}
			*f.val = f.tmp.Bytes
		case f.tmp.Valid:
			id := uuid.UUID(f.tmp.Bytes)
			*f.null = &id
		default:
			*f.null = nil
		}
	}
	return nil
}

// errNullUUID mirrors what scanning NULL into a uuid.UUID reports.
var errNullUUID = errorString("txn: cannot scan NULL into a uuid.UUID")

type errorString string

func (e errorString) Error() string { return string(e) }

// uuidConn runs generated statements on c with uuidArgs and uuidRow.
type uuidConn struct{ c db.DBTX }

// Wrap returns q with the argument and row conversions every generated
// statement of the library runs with (see uuidArgs), so that it works in
// every pgx exec mode. Wrapping twice is wrapping once.
func Wrap(q db.DBTX) db.DBTX {
	if u, ok := q.(uuidConn); ok {
		return u
	}
	return uuidConn{q}
}

func (u uuidConn) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	return u.c.Exec(ctx, sql, uuidArgs(args)...)
}

func (u uuidConn) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	return u.c.Query(ctx, sql, uuidArgs(args)...)
}

func (u uuidConn) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return uuidRow{u.c.QueryRow(ctx, sql, uuidArgs(args)...)}
}
