package reliability_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/inspect"
	"github.com/runledger-go/runledger/internal/testdb"
	"github.com/runledger-go/runledger/jobs"
	"github.com/runledger-go/runledger/replay"
)

// scoped is one tenant's jobs in the isolation matrix: a succeeded source,
// a replay of it (key "shared-key", reason "shared reason") and a pending
// job enqueued with idempotency key "shared-key". Every scope uses the same
// keys, so a lookup that ignored the scope would find another tenant's row.
type scoped struct {
	name    string
	scope   runledger.Scope
	source  uuid.UUID
	replay  uuid.UUID
	pending uuid.UUID
}

func (s scoped) jobIDs() []uuid.UUID { return []uuid.UUID{s.source, s.replay, s.pending} }

// result is an operation's observable outcome with ids masked, for
// comparing a job of another scope with a missing id.
type result struct {
	Outcome  string
	Code     string
	Category runledger.Category
	Message  string
	Detail   string
}

func resultOf(outcome any, err error) result {
	r := result{Outcome: fmt.Sprintf("%T", outcome)}
	if err != nil {
		var e *runledger.Error
		if errors.As(err, &e) {
			r.Code, r.Category, r.Message, r.Detail = string(e.Code), e.Category, e.Message, e.Detail
		} else {
			r.Detail = err.Error()
		}
	}
	return r
}

// masked returns r with id replaced by "<id>" in its detail.
func (r result) masked(id uuid.UUID) result {
	r.Detail = strings.ReplaceAll(r.Detail, id.String(), "<id>")
	return r
}

// probeUnlocked fails if another transaction holds any row lock on job id
// (FOR UPDATE NOWAIT from the admin pool conflicts with every row lock).
func probeUnlocked(t testing.TB, e *env, id uuid.UUID, during string) {
	t.Helper()
	ctx := context.Background()
	tx, err := e.admin.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	tenant := testdb.Scalar[uuid.UUID](t, e.admin, `SELECT organization_id FROM job_queue WHERE id = $1`, id)
	_, err = tx.Exec(ctx, `SELECT 1 FROM job_queue WHERE organization_id = $1 AND id = $2 FOR UPDATE NOWAIT`, tenant, id)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "55P03" {
		t.Fatalf("%s: job %s of another scope is locked by the caller's transaction", during, id)
	}
	if err != nil {
		t.Fatalf("probe: %v", err)
	}
}

// TestTenantIsolationMatrix runs every scoped read and write of replay and
// jobs from each of three scopes (global, organization A, organization B)
// against every job of the other two, and against a random missing id. A
// job of another scope must give exactly the result of the missing id
// (outcome, code, category, client message, and detail with the id
// masked), and the caller's open transaction must lock none of the other
// scopes' jobs (NOWAIT probes from another connection); afterwards the
// ledger must be unchanged. Keyed enqueue with the same key in each scope
// finds only the caller's own job.
func TestTenantIsolationMatrix(t *testing.T) {
	t.Parallel()
	ctx := testdb.Context(t)
	e := newEnv(t)
	testdb.DefineType(t, e.admin, "email")
	caller := openPool(t, e.url, "rl-caller", 2, nil)

	orgA, orgB := uuid.New(), uuid.New()
	tenants := []*scoped{
		{name: "global", scope: runledger.Global()},
		{name: "org A", scope: runledger.Organization(orgA)},
		{name: "org B", scope: runledger.Organization(orgB)},
	}
	for _, s := range tenants {
		s.source = testdb.Seed(t, e.admin, testdb.Succeeded(s.scope))
		rep := testdb.MustReplayed(t)(replay.SucceededJob(ctx, e.admin, replay.Request{Scope: s.scope, SourceJobID: s.source,
			ExpectedRunNumber: 1, Key: "shared-key", Reason: "shared reason"}))
		s.replay = rep.Replay.JobID
		res, err := jobs.Enqueue(ctx, e.admin, enqueueIn(s))
		if err != nil || res.Disposition != runledger.DispositionInserted {
			t.Fatalf("%s: keyed enqueue %+v, %v; want Inserted (the key is per scope)", s.name, res, err)
		}
		s.pending = res.Job.ID
	}
	// The ids are real: each scope reads its own jobs.
	for _, s := range tenants {
		for _, id := range s.jobIDs() {
			if j, err := inspect.Get(ctx, caller, s.scope, id); err != nil || j.Scope() != s.scope {
				t.Fatalf("%s cannot read its own job %s: %v", s.name, id, err)
			}
		}
	}
	before := takeSnapshot(t, e.admin)

	// ops are the scoped operations, each run in the caller's transaction
	// (reads take any Querier; writes have Tx variants). They return an
	// outcome value and an error.
	type op struct {
		name string
		run  func(tx pgx.Tx, scope runledger.Scope, id uuid.UUID) (any, error)
	}
	ops := []op{
		{"inspect.Get", func(tx pgx.Tx, s runledger.Scope, id uuid.UUID) (any, error) { return inspect.Get(ctx, tx, s, id) }},
		{"inspect.Events", func(tx pgx.Tx, s runledger.Scope, id uuid.UUID) (any, error) { return inspect.Events(ctx, tx, s, id) }},
		{"inspect.NewestEvents", func(tx pgx.Tx, s runledger.Scope, id uuid.UUID) (any, error) {
			return inspect.NewestEvents(ctx, tx, s, id, 10)
		}},
		{"replay.List", func(tx pgx.Tx, s runledger.Scope, id uuid.UUID) (any, error) {
			ls, _, err := replay.List(ctx, tx, s, id, replay.LineagePage{})
			return ls, err
		}},
		{"replay.Origin", func(tx pgx.Tx, s runledger.Scope, id uuid.UUID) (any, error) {
			return replay.Origin(ctx, tx, s, id)
		}},
		{"jobs.CancelTx", func(tx pgx.Tx, s runledger.Scope, id uuid.UUID) (any, error) {
			return jobs.CancelTx(ctx, tx, jobs.CancelRequest{Scope: s, JobID: id, Reason: "tenant probe"})
		}},
		{"replay.SucceededJobTx same key", func(tx pgx.Tx, s runledger.Scope, id uuid.UUID) (any, error) {
			return replay.SucceededJobTx(ctx, tx, replay.Request{Scope: s, SourceJobID: id, ExpectedRunNumber: 1,
				Key: "shared-key", Reason: "shared reason"})
		}},
		{"replay.SucceededJobTx new key", func(tx pgx.Tx, s runledger.Scope, id uuid.UUID) (any, error) {
			return replay.SucceededJobTx(ctx, tx, replay.Request{Scope: s, SourceJobID: id, ExpectedRunNumber: 1,
				Key: "fresh-key", Reason: "shared reason"})
		}},
	}
	inTx := func(fn func(tx pgx.Tx)) {
		tx, err := caller.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(context.Background()) //nolint:errcheck
		fn(tx)
	}

	checked := 0
	for _, c := range tenants {
		for _, o := range ops {
			missing := uuid.Must(uuid.NewV7())
			var want result
			inTx(func(tx pgx.Tx) {
				want = resultOf(o.run(tx, c.scope, missing)).masked(missing)
			})
			if want.Code != string(runledger.CodeJobNotFound) && want.Outcome != "replay.NotFound" {
				t.Fatalf("%s from %s on a missing id: %+v, want not found", o.name, c.name, want)
			}
			for _, other := range tenants {
				if other == c {
					continue
				}
				for _, id := range other.jobIDs() {
					inTx(func(tx pgx.Tx) {
						if got := resultOf(o.run(tx, c.scope, id)).masked(id); got != want {
							t.Errorf("%s from %s on a job of %s:\n got  %+v\n want %+v (as for a missing id)", o.name, c.name, other.name, got, want)
						}
						// Still inside the caller's transaction: nothing of
						// the other scope is locked.
						for _, oid := range other.jobIDs() {
							probeUnlocked(t, e, oid, fmt.Sprintf("%s from %s", o.name, c.name))
						}
						checked++
					})
				}
			}
		}
	}

	// The pool-owned writes commit: they must commit nothing.
	for _, c := range tenants {
		missing := uuid.Must(uuid.NewV7())
		wantCancel := resultOf(jobs.Cancel(ctx, caller, jobs.CancelRequest{Scope: c.scope, JobID: missing}))
		wantReplay := resultOf(replay.SucceededJob(ctx, caller, replay.Request{Scope: c.scope, SourceJobID: missing,
			ExpectedRunNumber: 1, Key: "shared-key", Reason: "shared reason"}))
		for _, other := range tenants {
			if other == c {
				continue
			}
			for _, id := range other.jobIDs() {
				if got := resultOf(jobs.Cancel(ctx, caller, jobs.CancelRequest{Scope: c.scope, JobID: id})); got.masked(id) != wantCancel.masked(missing) {
					t.Errorf("jobs.Cancel from %s on a job of %s: %+v, want %+v", c.name, other.name, got, wantCancel)
				}
				if got := resultOf(replay.SucceededJob(ctx, caller, replay.Request{Scope: c.scope, SourceJobID: id,
					ExpectedRunNumber: 1, Key: "shared-key", Reason: "shared reason"})); got.masked(id) != wantReplay.masked(missing) {
					t.Errorf("replay.SucceededJob from %s on a job of %s: %+v, want %+v", c.name, other.name, got, wantReplay)
				}
			}
		}
	}

	// Listing a scope shows exactly its own jobs.
	for _, c := range tenants {
		page, err := inspect.List(ctx, caller, inspect.ListRequest{Scope: c.scope, Limit: runledger.MaxLimit})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, j := range page.Jobs {
			got = append(got, j.ID.String())
		}
		var want []string
		for _, id := range c.jobIDs() {
			want = append(want, id.String())
		}
		sort.Strings(got)
		sort.Strings(want)
		if strings.Join(got, ",") != strings.Join(want, ",") {
			t.Errorf("List(%s) = %v, want its own jobs %v", c.name, got, want)
		}
		for _, st := range []runledger.JobStatus{runledger.JobStatusSucceeded, runledger.JobStatusPending} {
			st := st
			page, err := inspect.List(ctx, caller, inspect.ListRequest{Scope: c.scope, Status: &st, Limit: runledger.MaxLimit})
			if err != nil {
				t.Fatal(err)
			}
			for _, j := range page.Jobs {
				if j.Scope() != c.scope {
					t.Errorf("List(%s, %s) returned job %s of scope %s", c.name, st, j.ID, j.Scope())
				}
			}
		}
	}

	// Keyed enqueue with the shared key, in the caller's transaction, finds
	// its own scope's job (and locks only that one).
	for _, c := range tenants {
		inTx(func(tx pgx.Tx) {
			res, err := jobs.EnqueueTx(ctx, tx, enqueueIn(c))
			if err != nil || res.Disposition != runledger.DispositionExisting || res.Job.ID != c.pending {
				t.Errorf("keyed enqueue in %s: %+v, %v; want Existing %s", c.name, res, err, c.pending)
			}
			for _, other := range tenants {
				if other == c {
					continue
				}
				for _, id := range other.jobIDs() {
					probeUnlocked(t, e, id, "keyed enqueue from "+c.name)
				}
			}
		})
	}

	if after := takeSnapshot(t, e.admin); !after.equal(before) {
		t.Fatalf("the matrix changed the ledger:\nbefore %v\nafter  %v", before, after)
	}
	t.Logf("%d cross-scope calls checked against a missing id", checked)
}

func enqueueIn(s *scoped) jobs.EnqueueRequest {
	return jobs.EnqueueRequest{Scope: s.scope, JobType: "email", IdempotencyKey: "shared-key",
		Payload: []byte(`{"n":1}`)}
}
