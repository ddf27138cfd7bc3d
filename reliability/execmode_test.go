package reliability_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/health"
	"github.com/runledger-go/runledger/inspect"
	"github.com/runledger-go/runledger/internal/testdb"
	"github.com/runledger-go/runledger/jobs"
	"github.com/runledger-go/runledger/lease"
	"github.com/runledger-go/runledger/replay"
	"github.com/runledger-go/runledger/requeue"
)

// execModes are every pgx exec mode: the statement caches, describe then
// exec, and the two PgBouncer (transaction mode) needs before 1.21,
// QueryExecModeExec and the simple protocol.
var execModes = []pgx.QueryExecMode{
	pgx.QueryExecModeCacheStatement, pgx.QueryExecModeCacheDescribe,
	pgx.QueryExecModeDescribeExec, pgx.QueryExecModeExec, pgx.QueryExecModeSimpleProtocol,
}

// poolInMode opens a pool on url whose connections use mode.
func poolInMode(t *testing.T, ctx context.Context, url string, mode pgx.QueryExecMode) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.DefaultQueryExecMode = mode
	cfg.MaxConns = 4
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// The whole API works in every exec mode, pool-owned and in a caller's
// transaction: definitions, enqueue (unkeyed, keyed, with a chosen id),
// claim, heartbeats (single and batch, progress and checkpoint), release,
// complete with output and progress, fail, cancel, lease recovery,
// the reads, replay (every outcome) and bulk replay by list and by filter.
func TestEveryExecModeWholeAPI(t *testing.T) {
	t.Parallel()
	url := testdb.NewURL(t)
	for _, mode := range execModes {
		t.Run(mode.String(), func(t *testing.T) {
			ctx := testdb.Context(t)
			pool := poolInMode(t, ctx, url, mode)
			org := runledger.Organization(uuid.New())
			jobType := "exec-mode." + testdb.RandomHex(4)
			if _, err := jobs.UpsertDefinition(ctx, pool, jobs.DefinitionInput{JobType: jobType, MaxAttempts: testdb.Ptr[int32](2)}); err != nil {
				t.Fatalf("upsert definition: %v", err)
			}
			if _, err := jobs.GetDefinition(ctx, pool, jobType); err != nil {
				t.Fatalf("get definition: %v", err)
			}
			if _, err := jobs.ListDefinitions(ctx, pool); err != nil {
				t.Fatalf("list definitions: %v", err)
			}
			payload := json.RawMessage(`{"invoice":1042,"lines":[1,2]}`)
			enqueue := func(req jobs.EnqueueRequest, owned bool) jobs.EnqueueResult {
				t.Helper()
				req.Scope, req.JobType, req.Payload = org, jobType, payload
				var res jobs.EnqueueResult
				var err error
				if owned {
					res, err = jobs.Enqueue(ctx, pool, req)
				} else {
					err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
						res, err = jobs.EnqueueTx(ctx, tx, req)
						return err
					})
				}
				if err != nil {
					t.Fatalf("enqueue %+v (owned %v): %v", req, owned, err)
				}
				return res
			}
			for _, owned := range []bool{true, false} {
				plain := enqueue(jobs.EnqueueRequest{}, owned)
				testdb.JSONEqual(t, "payload", plain.Job.Payload, string(payload))
				key := "key-" + testdb.RandomHex(4)
				keyed := enqueue(jobs.EnqueueRequest{IdempotencyKey: key}, owned)
				if again := enqueue(jobs.EnqueueRequest{IdempotencyKey: key}, owned); again.Disposition != runledger.DispositionExisting || again.Job.ID != keyed.Job.ID {
					t.Fatalf("keyed retry: %+v", again)
				}
				id := uuid.Must(uuid.NewV7())
				chosen := enqueue(jobs.EnqueueRequest{JobID: id}, owned)
				if again := enqueue(jobs.EnqueueRequest{JobID: id}, owned); chosen.Job.ID != id || again.Disposition != runledger.DispositionExisting || again.Job.ID != id {
					t.Fatalf("chosen id: %+v then %+v", chosen, again)
				}
			}

			// Claim all six, then finish them every way.
			leased, err := lease.Claim(ctx, pool, lease.ClaimRequest{WorkerID: "w-" + testdb.RandomHex(4), JobTypes: []string{jobType}, Limit: 10, Lease: time.Minute})
			if err != nil || len(leased) != 6 {
				t.Fatalf("claim: %d jobs, %v", len(leased), err)
			}
			// Heartbeats: one with progress and a checkpoint, then all six.
			hb := lease.HeartbeatRequest{JobID: leased[0].ID, RunNumber: 1, Attempt: 1, WorkerID: *leased[0].WorkerID, Lease: time.Minute,
				ProgressDone: testdb.Ptr[int64](1), ProgressTotal: testdb.Ptr[int64](3), Checkpoint: json.RawMessage(`{"page":1}`)}
			if r, err := lease.Heartbeat(ctx, pool, hb); err != nil || !r.Recorded {
				t.Fatalf("heartbeat: %+v, %v", r, err)
			}
			var beats []lease.HeartbeatRequest
			for _, l := range leased {
				beats = append(beats, lease.HeartbeatRequest{JobID: l.ID, RunNumber: l.RunNumber, Attempt: l.Attempt, WorkerID: *l.WorkerID, Lease: time.Minute})
			}
			if rs, err := lease.HeartbeatMany(ctx, pool, beats); err != nil || len(rs) != 6 || rs[5].Err != nil {
				t.Fatalf("heartbeat many: %+v, %v", rs, err)
			}
			extra := enqueue(jobs.EnqueueRequest{}, true).Job
			held, err := lease.Claim(ctx, pool, lease.ClaimRequest{WorkerID: "w-release", JobTypes: []string{jobType}, Limit: 1, Lease: time.Minute})
			if err != nil || len(held) != 1 || held[0].ID != extra.ID {
				t.Fatalf("claim one: %+v, %v", held, err)
			}
			if rs, err := lease.Release(ctx, pool, []lease.ReleaseRequest{{JobID: extra.ID, RunNumber: 1, Attempt: 1, WorkerID: "w-release"}}); err != nil || rs[0].Err != nil {
				t.Fatalf("release: %+v, %v", rs, err)
			}
			if _, err := jobs.Cancel(ctx, pool, jobs.CancelRequest{Scope: org, JobID: extra.ID}); err != nil {
				t.Fatalf("cancel the released job: %v", err)
			}
			done, err := lease.Complete(ctx, pool, lease.CompleteRequest{
				JobID: leased[0].ID, RunNumber: leased[0].RunNumber, Attempt: leased[0].Attempt, WorkerID: *leased[0].WorkerID,
				Output: json.RawMessage(`{"sent":true}`), ProgressDone: testdb.Ptr[int64](3), ProgressTotal: testdb.Ptr[int64](3),
			})
			if err != nil || done.Status != runledger.JobStatusSucceeded {
				t.Fatalf("complete: %+v %v", done, err)
			}
			testdb.JSONEqual(t, "output", done.Output, `{"sent":true}`)
			scope := org
			err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				_, err := lease.CompleteTx(ctx, tx, lease.CompleteRequest{Scope: &scope,
					JobID: leased[1].ID, RunNumber: leased[1].RunNumber, Attempt: leased[1].Attempt, WorkerID: *leased[1].WorkerID})
				return err
			})
			if err != nil {
				t.Fatalf("complete in a transaction: %v", err)
			}
			if _, err := lease.Complete(ctx, pool, testdb.CompleteRequest(leased[0])); !errors.Is(err, runledger.CodeLeaseMismatch) {
				t.Fatalf("second complete: %v", err)
			}
			failed, err := lease.Fail(ctx, pool, lease.FailRequest{
				JobID: leased[2].ID, RunNumber: leased[2].RunNumber, Attempt: leased[2].Attempt, WorkerID: *leased[2].WorkerID,
				ErrorCode: "smtp.down", ErrorMessage: "the relay refused", RetryDelay: testdb.Ptr(time.Hour),
			})
			if err != nil || failed.Status != runledger.JobStatusPending {
				t.Fatalf("fail: %+v %v", failed, err)
			}
			err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				_, err := lease.FailTx(ctx, tx, lease.FailRequest{JobID: leased[3].ID, RunNumber: leased[3].RunNumber,
					Attempt: leased[3].Attempt, WorkerID: *leased[3].WorkerID, Terminal: true})
				return err
			})
			if err != nil {
				t.Fatalf("fail in a transaction: %v", err)
			}
			if _, err := jobs.Cancel(ctx, pool, jobs.CancelRequest{Scope: org, JobID: leased[4].ID, Reason: "no longer wanted"}); err != nil {
				t.Fatalf("cancel: %v", err)
			}
			if _, err := jobs.Cancel(ctx, pool, jobs.CancelRequest{Scope: org, JobID: leased[4].ID}); !errors.Is(err, runledger.CodeNotCancelable) {
				t.Fatalf("second cancel: %v", err)
			}
			testdb.Exec(t, pool, `UPDATE job_queue SET lease_expires_at = now() - interval '1 second' WHERE id = $1`, leased[5].ID)
			if rec, err := lease.RecoverExpiredLeases(ctx, pool, 10); err != nil || len(rec) != 1 {
				t.Fatalf("recover: %d jobs, %v", len(rec), err)
			}

			// Reads.
			if _, err := inspect.Get(ctx, pool, org, done.ID); err != nil {
				t.Fatalf("get: %v", err)
			}
			if evs, err := inspect.Events(ctx, pool, org, done.ID); err != nil || len(evs) != 4 {
				t.Fatalf("events: %d, %v", len(evs), err)
			}
			if page, err := inspect.List(ctx, pool, inspect.ListRequest{Scope: org, Limit: 100}); err != nil || len(page.Jobs) != 7 {
				t.Fatalf("list: %d, %v", len(page.Jobs), err)
			}
			if _, err := inspect.GetDetail(ctx, pool, inspect.DetailRequest{Scope: org, JobID: done.ID}); err != nil {
				t.Fatalf("detail: %v", err)
			}

			// Replay every outcome, pool-owned and in a caller's transaction.
			for _, owned := range []bool{true, false} {
				do := func(req replay.Request) (replay.Outcome, error) {
					if owned {
						return replay.SucceededJob(ctx, pool, req)
					}
					var out replay.Outcome
					err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
						var err error
						out, err = replay.SucceededJobTx(ctx, tx, req)
						return err
					})
					return out, err
				}
				key := "replay-" + testdb.RandomHex(4)
				req := replay.Request{Scope: org, SourceJobID: done.ID, ExpectedRunNumber: 1, Key: key, Reason: "r"}
				first := testdb.MustReplayed(t)(do(req))
				again := testdb.MustReplayed(t)(do(req))
				if first.Disposition != runledger.DispositionInserted || again.Disposition != runledger.DispositionExisting || again.Replay.JobID != first.Replay.JobID {
					t.Fatalf("owned=%v: %+v then %+v", owned, first, again)
				}
				if _, err := do(replay.Request{Scope: org, SourceJobID: done.ID, ExpectedRunNumber: 1, Key: key, Reason: "other"}); !errors.Is(err, runledger.CodeReplayIdempotencyConflict) {
					t.Fatalf("owned=%v: conflict: %v", owned, err)
				}
				if out, err := do(replay.Request{Scope: org, SourceJobID: done.ID, ExpectedRunNumber: 2, Key: key, Reason: "r"}); err != nil {
					t.Fatalf("owned=%v: mismatch: %v", owned, err)
				} else if m, ok := out.(replay.ExpectationMismatch); !ok || m.Actual.ID != done.ID {
					t.Fatalf("owned=%v: mismatch: %T %+v", owned, out, out)
				}
				if out, err := do(replay.Request{Scope: runledger.Global(), SourceJobID: done.ID, ExpectedRunNumber: 1, Key: key, Reason: "r"}); err != nil {
					t.Fatalf("owned=%v: other scope: %v", owned, err)
				} else if _, ok := out.(replay.NotFound); !ok {
					t.Fatalf("owned=%v: other scope: %T", owned, out)
				}
			}
			if ls, _, err := replay.List(ctx, pool, org, done.ID, replay.LineagePage{}); err != nil || len(ls) != 2 {
				t.Fatalf("lineage list: %d, %v", len(ls), err)
			}

			// Bulk replay by list and by filter, and its count.
			list := replay.BulkRequest{Scope: org, Key: "bulk-list", Reason: "r",
				Sources: []replay.Source{{JobID: done.ID, ExpectedRunNumber: 1}, {JobID: leased[1].ID, ExpectedRunNumber: 1}, {JobID: failed.ID, ExpectedRunNumber: 1}}}
			sum, err := replay.Bulk(ctx, pool, list, nil)
			if err != nil || sum.Inserted != 2 || sum.Mismatch != 1 {
				t.Fatalf("bulk by list: %+v, %v", sum, err)
			}
			filter := replay.BulkRequest{Scope: org, Key: "bulk-filter", Reason: "r", Filter: &replay.Filter{JobType: jobType}}
			if n, err := replay.BulkCount(ctx, pool, filter); err != nil || n != 2 {
				t.Fatalf("bulk count: %d, %v", n, err)
			}
			if sum, err := replay.Bulk(ctx, pool, filter, nil); err != nil || sum.Inserted != 2 {
				t.Fatalf("bulk by filter: %+v, %v", sum, err)
			}

			// Requeue: the dead-lettered job, its idempotent retry in a
			// caller's transaction, the canceled one (its lease still live)
			// by list, and a filter.
			rq := requeue.Request{Scope: org, JobID: leased[3].ID, ExpectedStatus: requeue.DeadLettered, ExpectedRunNumber: 1, Reason: "provider back"}
			if out, err := requeue.Job(ctx, pool, rq); err != nil {
				t.Fatalf("requeue: %v", err)
			} else if r, ok := out.(requeue.Requeued); !ok || r.Disposition != runledger.DispositionInserted {
				t.Fatalf("requeue: %T %+v, want inserted", out, out)
			}
			err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				out, err := requeue.JobTx(ctx, tx, rq)
				if r, ok := out.(requeue.Requeued); err == nil && (!ok || r.Disposition != runledger.DispositionExisting) {
					t.Errorf("requeue retry in a transaction: %T %+v, want existing", out, out)
				}
				return err
			})
			if err != nil {
				t.Fatalf("requeue in a transaction: %v", err)
			}
			rsum, err := requeue.Bulk(ctx, pool, requeue.BulkRequest{Scope: org, Reason: "r",
				Sources: []requeue.Source{{JobID: leased[4].ID, ExpectedStatus: requeue.Canceled, ExpectedRunNumber: 1}}}, nil)
			if err != nil || rsum.Selected != 1 || rsum.NotQuiesced != 1 {
				t.Fatalf("bulk requeue by list: %+v, %v", rsum, err)
			}
			if _, err := requeue.Bulk(ctx, pool, requeue.BulkRequest{Scope: org, Reason: "r",
				Filter: &requeue.Filter{Status: requeue.DeadLettered, JobType: jobType}}, nil); err != nil {
				t.Fatalf("bulk requeue by filter: %v", err)
			}

			// Queue health: the stats, then a prune of every finished job
			// (dry run first).
			if st, err := health.GetStats(ctx, pool, health.StatsRequest{Scope: &scope}); err != nil || len(st.Types) == 0 {
				t.Fatalf("stats: %+v, %v", st, err)
			}
			cutoff := time.Now().Add(time.Hour)
			if _, err := health.Prune(ctx, pool, health.PruneRequest{Scope: &scope, FinishedBefore: cutoff, DryRun: true}); err != nil {
				t.Fatalf("prune dry run: %v", err)
			}
			if _, err := health.Prune(ctx, pool, health.PruneRequest{Scope: &scope, FinishedBefore: cutoff}); err != nil {
				t.Fatalf("prune: %v", err)
			}
		})
	}
}
