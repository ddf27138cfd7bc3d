// Package wake decides when an insert of a due job wakes the workers: the
// statement then sends pg_notify on Channel with the job type as payload,
// which workers listening on Channel hear when the transaction commits.
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
	"sync"
	"time"
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

// Due reports whether an insert of a due job of jobType should notify now,
// and if so records that it did.
func Due(jobType string) bool {
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
