package worker

import (
	"context"
	"time"

	"github.com/runledger-go/runledger/schedules"
)

// scheduleBatch is the most schedules one round of the scheduler claims;
// a full round is followed by another at once.
const scheduleBatch = 100

// fireSchedules fires the due schedules of the worker's types at start
// and every poll interval until ctx ends (a poll first asks
// schedules.AnyDue, one statement, and opens a firing transaction only
// when a schedule is due), and wakes the fetcher when a
// round fired a job (it is due now, or at its jitter). A schedule that
// cannot fire is logged once per cursor, not at every round.
func (r *run) fireSchedules(ctx context.Context) {
	if len(r.types) == 0 {
		return // an empty filter would fire every type's schedules
	}
	reported := map[string]time.Time{}
	for {
		for {
			callCtx, cancel := context.WithTimeout(ctx, max(r.cfg.PollInterval, 5*time.Second))
			// Nothing due (the usual poll): one statement, no transaction.
			due, err := schedules.AnyDue(callCtx, r.pool, r.types)
			if err != nil || !due {
				cancel()
				if err != nil && ctx.Err() == nil {
					r.log.Warn("runledger worker: reading due schedules failed", "worker", r.fp, "err", err)
				}
				break
			}
			res, err := schedules.FireDue(callCtx, r.pool, schedules.FireRequest{JobTypes: r.types, Limit: scheduleBatch})
			cancel()
			if err != nil {
				if ctx.Err() == nil {
					r.log.Warn("runledger worker: firing schedules failed", "worker", r.fp, "err", err)
				}
				break
			}
			for _, b := range res.Blocked {
				key := b.Scope.String() + "\x00" + b.Schedule
				if at, ok := reported[key]; ok && at.Equal(b.NextFireAt) {
					continue
				}
				reported[key] = b.NextFireAt
				r.log.Warn("runledger worker: schedule not fired", "worker", r.fp, "scope", b.Scope.String(),
					"schedule", b.Schedule, "job_type", b.JobType, "next_fire_at", b.NextFireAt, "err", b.Err)
			}
			if len(res.Fired) > 0 {
				r.log.Info("runledger worker: fired schedules", "worker", r.fp, "jobs", len(res.Fired))
				r.signal()
			}
			if len(res.Fired) < scheduleBatch {
				break
			}
		}
		if !sleep(ctx.Done(), r.cfg.PollInterval) {
			return
		}
	}
}
