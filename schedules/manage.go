package schedules

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"reflect"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/db"
	"github.com/runledger-go/runledger/internal/dberr"
	"github.com/runledger-go/runledger/internal/rows"
	"github.com/runledger-go/runledger/internal/txn"
	"github.com/runledger-go/runledger/internal/validate"
	"github.com/runledger-go/runledger/jobs"
)

// jsonEqual compares two JSON texts as values (numbers by their text, so
// 1 and 1.0 differ, as jsonb keeps them).
func jsonEqual(a, b []byte) bool {
	var x, y any
	da := json.NewDecoder(bytes.NewReader(a))
	da.UseNumber()
	db := json.NewDecoder(bytes.NewReader(b))
	db.UseNumber()
	if da.Decode(&x) != nil || db.Decode(&y) != nil {
		return false
	}
	return reflect.DeepEqual(x, y)
}

// ValidateRef checks a scope and schedule name without touching the
// database: job.organization_invalid, schedule.name_invalid.
func ValidateRef(scope runledger.Scope, name string) error { return checkRef(scope, name) }

func checkRef(scope runledger.Scope, name string) error {
	if err := validate.Scope(scope); err != nil {
		return err
	}
	return validateName(name)
}

func notFound(scope runledger.Scope, name string) error {
	return errNotFound.Newf("no schedule %q in scope %s", name, scope)
}

// Get reads the schedule named name in scope, without a lock, on q (a
// pool, a connection or a transaction). A schedule
// of another scope is not found (schedule.not_found).
func Get(ctx context.Context, q jobs.Querier, scope runledger.Scope, name string) (Schedule, error) {
	if err := checkRef(scope, name); err != nil {
		return Schedule{}, err
	}
	r, err := queries.ScheduleGet(ctx, q, db.ScheduleGetParams{OrganizationID: rows.Tenant(scope), Name: name})
	if errors.Is(err, pgx.ErrNoRows) {
		return Schedule{}, notFound(scope, name)
	}
	if err != nil {
		return Schedule{}, dberr.Translate(ctx, "read schedule", err)
	}
	return scheduleOf(r), nil
}

// List returns the schedules of scope by name, at most limit (1 to 1000,
// else schedule.limit_invalid), without a lock. None is an empty slice.
func List(ctx context.Context, q jobs.Querier, scope runledger.Scope, limit int) ([]Schedule, error) {
	if err := validate.Scope(scope); err != nil {
		return nil, err
	}
	if limit < 1 || limit > 1000 {
		return nil, errLimit.Newf("limit %d", limit)
	}
	rs, err := queries.ScheduleList(ctx, q, db.ScheduleListParams{OrganizationID: rows.Tenant(scope), MaxRows: int32(limit)})
	if err != nil {
		return nil, dberr.Translate(ctx, "list schedules", err)
	}
	out := make([]Schedule, 0, len(rs))
	for _, r := range rs {
		out = append(out, scheduleOf(r))
	}
	return out, nil
}

// Pause makes the schedule inactive, durably: no firer claims it until
// Resume. Its cursor is kept (Resume moves it). Pausing a paused schedule
// changes nothing. It waits for a firer holding the schedule, so once it
// returns no fire of the schedule is under way.
func Pause(ctx context.Context, pool *pgxpool.Pool, scope runledger.Scope, name string) (Schedule, error) {
	return setActive(ctx, pool, scope, name, false)
}

// Resume makes a paused schedule active again with its cursor at the
// first tick after the database clock: ticks that passed while it was
// paused never fire, whatever the missed policy. Resuming an active
// schedule changes nothing.
func Resume(ctx context.Context, pool *pgxpool.Pool, scope runledger.Scope, name string) (Schedule, error) {
	return setActive(ctx, pool, scope, name, true)
}

// PauseTx and ResumeTx are Pause and Resume inside the caller's
// transaction.
func PauseTx(ctx context.Context, tx pgx.Tx, scope runledger.Scope, name string) (Schedule, error) {
	return setActiveTx(ctx, tx, scope, name, false)
}

// ResumeTx: see PauseTx.
func ResumeTx(ctx context.Context, tx pgx.Tx, scope runledger.Scope, name string) (Schedule, error) {
	return setActiveTx(ctx, tx, scope, name, true)
}

func setActive(ctx context.Context, pool *pgxpool.Pool, scope runledger.Scope, name string, active bool) (Schedule, error) {
	if err := checkRef(scope, name); err != nil {
		return Schedule{}, err
	}
	return txn.ReadCommitted(ctx, pool, "schedule pause or resume", func(q db.DBTX) (Schedule, error) {
		return setActiveQ(ctx, q, scope, name, active)
	})
}

func setActiveTx(ctx context.Context, tx pgx.Tx, scope runledger.Scope, name string, active bool) (Schedule, error) {
	if err := checkRef(scope, name); err != nil {
		return Schedule{}, err
	}
	return setActiveQ(ctx, txn.Join(tx, "schedule pause or resume").DB(), scope, name, active)
}

func setActiveQ(ctx context.Context, q db.DBTX, scope runledger.Scope, name string, active bool) (Schedule, error) {
	tenant := rows.Tenant(scope)
	locked, err := queries.ScheduleLock(ctx, q, db.ScheduleLockParams{OrganizationID: tenant, Name: name})
	if errors.Is(err, pgx.ErrNoRows) {
		return Schedule{}, notFound(scope, name)
	}
	if err != nil {
		return Schedule{}, dberr.Translate(ctx, "lock schedule", err)
	}
	cur := locked.JobSchedule
	if cur.Active == active {
		return scheduleOf(cur), nil
	}
	next := cur.NextFireAt
	if active {
		sp, err := parseSpec(cur.Cron, cur.Tz)
		if err != nil {
			return Schedule{}, err
		}
		next = sp.next(locked.Now)
	}
	r, err := queries.ScheduleSetActive(ctx, q, db.ScheduleSetActiveParams{
		OrganizationID: tenant, Name: name, Active: active, NextFireAt: next,
	})
	if err != nil {
		return Schedule{}, dberr.Translate(ctx, "pause or resume schedule", err)
	}
	return scheduleOf(r), nil
}

// Delete removes the schedule and returns it as it was, in one statement
// on q (a pool, or the caller's transaction). It waits for a firer
// holding it; jobs it fired stay.
func Delete(ctx context.Context, q jobs.Querier, scope runledger.Scope, name string) (Schedule, error) {
	if err := checkRef(scope, name); err != nil {
		return Schedule{}, err
	}
	r, err := queries.ScheduleDelete(ctx, q, db.ScheduleDeleteParams{OrganizationID: rows.Tenant(scope), Name: name})
	if errors.Is(err, pgx.ErrNoRows) {
		return Schedule{}, notFound(scope, name)
	}
	if err != nil {
		return Schedule{}, dberr.Translate(ctx, "delete schedule", err)
	}
	return scheduleOf(r), nil
}
