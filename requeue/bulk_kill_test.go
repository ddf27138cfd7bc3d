package requeue_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/internal/failpoint"
	"github.com/runledger-go/runledger/internal/testdb"
	"github.com/runledger-go/runledger/internal/txn"
	"github.com/runledger-go/runledger/requeue"
)

// bulkBackend tags the connections of the bulk under test, so a test can
// find its backend in pg_stat_activity.
const bulkBackend = "requeue-bulk-under-test"

type killMarker struct{}

func killBulkBackend(t *testing.T, admin *pgxpool.Pool) {
	testdb.Exec(t, admin, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1`, bulkBackend)
	testdb.WaitFor(t, "the bulk backend to end", func() bool {
		return testdb.Scalar[int64](t, admin, `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1`, bulkBackend) == 0
	})
}

// TestBulkKilledBackendKeepsWholeChunksAndRerunConverges kills the bulk's
// backend at a chunk boundary, after a chunk's locking update (before its
// classification read and COMMIT) and just before a chunk's COMMIT: only
// the chunks committed before stay, whole, and the same action again
// requeues exactly the rest, each job once.
func TestBulkKilledBackendKeepsWholeChunksAndRerunConverges(t *testing.T) {
	for _, point := range []string{"boundary", "after requeue", "before commit"} {
		t.Run(point, func(t *testing.T) {
			ctx := context.WithValue(testdb.Context(t), killMarker{}, true)
			url := testdb.NewURL(t)
			admin := testdb.OpenPool(t, url, 4, nil)
			pool := testdb.OpenPool(t, url, 1, map[string]string{"application_name": bulkBackend})
			scope := runledger.Organization(uuid.New())
			ids := seedFinished(t, admin, scope, "charge.capture", "DEAD_LETTERED", "provider.down", 35, time.Now().Add(-time.Hour))
			list := make([]requeue.Source, len(ids))
			for i, id := range ids {
				list[i] = requeue.Source{JobID: id, ExpectedStatus: requeue.DeadLettered, ExpectedRunNumber: 1}
			}
			req := requeue.BulkRequest{Scope: scope, Reason: "kill " + point, Sources: list, ChunkSize: 10}

			mine := func(ctx context.Context) bool { return ctx.Value(killMarker{}) != nil }
			var disable func()
			switch point {
			case "boundary":
				disable = failpoint.EnableFor(requeue.FailpointBulkAfterChunk, func(ctx context.Context, arg any) {
					if mine(ctx) && arg.(requeue.BulkCall).Chunk == 1 {
						killBulkBackend(t, admin)
					}
				}, mine)
			case "after requeue":
				disable = failpoint.EnableFor(requeue.FailpointBulkAfterRequeue, func(ctx context.Context, arg any) {
					if mine(ctx) && arg.(requeue.BulkCall).Chunk == 2 {
						killBulkBackend(t, admin)
					}
				}, mine)
			case "before commit":
				commits := 0
				disable = failpoint.EnableFor(txn.FailpointBeforeCommit, func(ctx context.Context, arg any) {
					if mine(ctx) && arg.(txn.FailpointCall).Op == "bulk job requeue" {
						if commits == 2 {
							killBulkBackend(t, admin)
						}
						commits++
					}
				}, mine)
			}
			var chunks []int
			_, err := requeue.Bulk(ctx, pool, req, func(c requeue.BulkChunk) error {
				chunks = append(chunks, c.Index)
				return nil
			})
			disable()
			if err == nil {
				t.Fatal("Bulk survived the kill of its connection")
			}
			if !errors.Is(err, runledger.CodeTransient) && !errors.Is(err, runledger.ErrCommitUnconfirmed) {
				t.Fatalf("error %s, want transient or commit unconfirmed", testdb.Detail(err))
			}
			if fmt.Sprint(chunks) != "[0 1]" {
				t.Fatalf("chunks reported %v, want [0 1]", chunks)
			}
			requeued := func() int64 {
				return testdb.Scalar[int64](t, admin, `SELECT count(*) FROM job_queue WHERE id = ANY($1) AND status = 'PENDING' AND run_number = 2`, ids)
			}
			if n := requeued(); n != 20 {
				t.Fatalf("after the kill, %d jobs requeued, want exactly the first two chunks (20)", n)
			}
			sum, err := requeue.Bulk(testdb.Context(t), pool, req, nil)
			if err != nil || sum.Requeued != 15 || sum.Existing != 20 || requeued() != 35 {
				t.Fatalf("rerun: %+v %v", sum, err)
			}
			if n := testdb.Scalar[int64](t, admin, `SELECT count(*) FROM job_events WHERE job_id = ANY($1) AND event_type = 'REQUEUED'`, ids); n != 35 {
				t.Fatalf("%d REQUEUED events, want 35", n)
			}
		})
	}
}

// TestSingleKilledBeforeCommitRetries kills the backend of a pool-owned
// requeue after its statements ran and before its COMMIT: the caller gets
// a transient or commit-unconfirmed error, the job is as it was, and the
// documented recovery (the same request again) requeues it once.
func TestSingleKilledBeforeCommitRetries(t *testing.T) {
	ctx := context.WithValue(testdb.Context(t), killMarker{}, true)
	url := testdb.NewURL(t)
	admin := testdb.OpenPool(t, url, 4, nil)
	pool := testdb.OpenPool(t, url, 1, map[string]string{"application_name": bulkBackend})
	scope := runledger.Organization(uuid.New())
	id := seedFinished(t, admin, scope, "charge.capture", "DEAD_LETTERED", "provider.down", 1, time.Now().Add(-time.Hour))[0]
	req := requeue.Request{Scope: scope, JobID: id, ExpectedStatus: requeue.DeadLettered, ExpectedRunNumber: 1, Reason: "r"}
	mine := func(ctx context.Context) bool { return ctx.Value(killMarker{}) != nil }
	disable := failpoint.EnableFor(txn.FailpointBeforeCommit, func(ctx context.Context, arg any) {
		if mine(ctx) && arg.(txn.FailpointCall).Op == "compare-and-requeue" {
			killBulkBackend(t, admin)
		}
	}, mine)
	_, err := requeue.Job(ctx, pool, req)
	disable()
	if !errors.Is(err, runledger.CodeTransient) && !errors.Is(err, runledger.ErrCommitUnconfirmed) {
		t.Fatalf("error %v, want transient or commit unconfirmed", err)
	}
	if st := testdb.Scalar[string](t, admin, `SELECT status::text FROM job_queue WHERE id = $1`, id); st != "DEAD_LETTERED" {
		t.Fatalf("after the kill the job is %s", st)
	}
	got := mustRequeued(t)(requeue.Job(testdb.Context(t), pool, req))
	again := mustRequeued(t)(requeue.Job(testdb.Context(t), pool, req))
	if got.Disposition != runledger.DispositionInserted || again.Disposition != runledger.DispositionExisting || requeuedEvents(t, admin, id) != 1 {
		t.Fatalf("retries: %s then %s, %d events", got.Disposition, again.Disposition, requeuedEvents(t, admin, id))
	}
}
