// Package wake decides when an insert of a due job wakes the workers, and
// queues the statement that does it (Queue): pg_notify on Channel with the
// job type as payload, in the insert's transaction, which workers
// listening on Channel hear when it commits. An empty payload wakes every
// worker (a replay's, whose job type is its source's, unknown when its
// statements are queued).
//
// A notifying transaction holds PostgreSQL's notification lock from just
// before its commit until the commit is durable, so notifying commits run
// one after another. To keep concurrent enqueues committing together, this
// process notifies at most once per Interval per job type (the first
// insert in each interval); workers re-claim after every claim that found
// work and poll as a fallback, so a job inserted within an interval after
// a notified one is picked up by the same wake-up or the next one.
package wake

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/runledger-go/runledger/db"
	"github.com/runledger-go/runledger/internal/txn"
)

// Channel is the LISTEN/NOTIFY channel of due jobs.
const Channel = "runledger_job_due"

// Interval is the shortest time between two notifications of one job type
// from this process.
const Interval = 2 * time.Millisecond

var (
	mu   sync.Mutex
	last = map[string]time.Time{}
)

// always makes Due report true (Always).
var always atomic.Int32

// Always makes Due report true, for every job type, until the returned
// function is called: for tests that need the statements an operation
// sends to be the same every time. Calls nest.
func Always() (restore func()) {
	always.Add(1)
	var once sync.Once
	return func() { once.Do(func() { always.Add(-1) }) }
}

// Due reports whether an insert of a due job of jobType should notify now,
// and if so records that it did.
func Due(jobType string) bool {
	if always.Load() > 0 {
		return true
	}
	now := time.Now()
	mu.Lock()
	defer mu.Unlock()
	if t, ok := last[jobType]; ok && now.Sub(t) < Interval {
		return false
	}
	if len(last) > 4096 {
		// Bounded: forget every type (each then notifies once more).
		clear(last)
	}
	last[jobType] = now
	return true
}

var queries = db.New()

// Queue queues in b, after what is already queued, the statement that
// wakes the workers of jobTypes when b's transaction commits: a statement
// of its own (see WorkerNotifyDue in queries/worker.sql for why). Nothing
// is queued for no types. An insert that writes nothing (a keyed enqueue
// that finds its job, a replay that finds its lineage) may so send a wake
// for nothing; the workers then claim nothing and wait again.
func Queue(ctx context.Context, b *txn.Batch, jobTypes ...string) {
	if len(jobTypes) == 0 {
		return
	}
	txn.Queue(b, "wake the workers", func(q db.DBTX) (struct{}, error) {
		return struct{}{}, queries.WorkerNotifyDue(ctx, q, jobTypes)
	})
}

// Send is Queue for a statement run on its own in a transaction of the
// caller's (q).
func Send(ctx context.Context, q db.DBTX, jobTypes ...string) error {
	if len(jobTypes) == 0 {
		return nil
	}
	return queries.WorkerNotifyDue(ctx, q, jobTypes)
}
