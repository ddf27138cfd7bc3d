package main

import (
	"context"
	"fmt"
	"runtime"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// watch reads, every -lease-sample (250 ms by default), the leases each of
// the runtime's workers holds (SELECT worker_id, count(*) FROM job_queue
// WHERE status = 'LEASED' GROUP BY 1), the database's deadlock counter
// (pg_stat_database.deadlocks) and the process's heap (HeapAlloc), memory
// from the OS (Sys) and goroutines, and keeps only their extremes, so that
// its memory does not grow with the duration. It runs on one goroutine;
// the report reads it once that has returned.
type watch struct {
	cfg config
	st  *stats
	ids []string

	readings, failed int64
	// maxLeases is the most leases each worker held at a reading;
	// maxAway the same away from the restart (the bound applies there).
	maxLeases, maxAway map[string]int64
	// over counts readings, away from the restart, in which a worker held
	// more leases than its Concurrency; firstOver is the first of them.
	over      int64
	firstOver string
	// deadlocks is the counter's rise over the run: the sum of its rises
	// between readings. An immediate restart discards the server's
	// statistics (the counter starts again from 0): a reading below the
	// previous one adds its whole value; deadlocks between the last
	// reading before the restart and the restart itself are not seen.
	deadlocks, lastDeadlocks int64
	deadlockRead             bool

	maxHeapAlloc, maxSys uint64
	maxGoroutines        int
}

func newWatch(cfg config, st *stats) *watch {
	return &watch{cfg: cfg, st: st, ids: workerIDs(cfg), maxLeases: map[string]int64{}, maxAway: map[string]int64{}}
}

// run reads until ctx ends.
func (w *watch) run(ctx context.Context, monitor *pgxpool.Pool) {
	tick := time.NewTicker(w.cfg.leaseSample)
	defer tick.Stop()
	for {
		w.read(ctx, monitor)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// nearRestart tells whether t falls from the restart's beginning to
// -window after its end (or the restart is under way).
func (w *watch) nearRestart(t time.Time) bool {
	w.st.mu.Lock()
	began, ended := w.st.restartBegan, w.st.restartEnded
	w.st.mu.Unlock()
	return !began.IsZero() && !t.Before(began) && (ended.IsZero() || !t.After(ended.Add(w.cfg.window)))
}

func (w *watch) read(ctx context.Context, monitor *pgxpool.Pool) {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	w.maxHeapAlloc = max(w.maxHeapAlloc, ms.HeapAlloc)
	w.maxSys = max(w.maxSys, ms.Sys)
	w.maxGoroutines = max(w.maxGoroutines, runtime.NumGoroutine())
	w.readings++

	qctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	t := time.Now()
	rows, err := monitor.Query(qctx, `SELECT worker_id, count(*) FROM job_queue
		WHERE status = 'LEASED' AND worker_id = ANY($1) GROUP BY 1`, w.ids)
	if err != nil {
		w.failed++
		return
	}
	leases := map[string]int64{}
	for rows.Next() {
		var id string
		var n int64
		if err := rows.Scan(&id, &n); err != nil {
			break
		}
		leases[id] = n
	}
	rows.Close()
	var dl int64
	if err == nil {
		err = rows.Err()
	}
	if err == nil {
		err = monitor.QueryRow(qctx, `SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()`).Scan(&dl)
	}
	if err != nil {
		w.failed++
		return
	}
	near := w.nearRestart(t)
	for id, n := range leases {
		w.maxLeases[id] = max(w.maxLeases[id], n)
		if near {
			continue
		}
		w.maxAway[id] = max(w.maxAway[id], n)
		if n > int64(w.cfg.workerConcurrency) {
			w.over++
			if w.firstOver == "" {
				w.firstOver = fmt.Sprintf("%s held %d at %s", id, n, t.Sub(w.st.start).Round(time.Millisecond))
			}
		}
	}
	switch {
	case !w.deadlockRead:
		w.deadlockRead = true
	case dl >= w.lastDeadlocks:
		w.deadlocks += dl - w.lastDeadlocks
	default: // the counter was reset (an immediate restart)
		w.deadlocks += dl
	}
	w.lastDeadlocks = dl
}

// dupCount is a count of duplicate attempts, or of attempts no handler
// outcome planned, by phase: near the restart (from its beginning to
// -window after its end) or away from it.
type dupCount struct{ near, away int64 }

// duplicates is what checkDuplicates found among the runtime's jobs.
type duplicates struct {
	// twice: (job, attempt) pairs whose side effect was recorded more
	// than once (one attempt's handler ran twice), by the time of the
	// second record.
	twice dupCount
	// unended: attempts n >= 2 of a job whose attempt n-1 has no
	// RETRY_SCHEDULED event (never failed, timed out or recovered), by
	// the time of attempt n's first side effect or event.
	unended dupCount
	// unplanned: RETRY_SCHEDULED events no handler asked for (the retry
	// kind's first attempt and the timeout kind's TIMEOUT aside), by
	// failure kind: the lease recovered (LEASE_EXPIRED) or the side
	// effect could not be written (RETRYABLE); and dead-letters by
	// recovery (a lease that ran out on the job's last attempt), as
	// "LEASE_EXPIRED (dead-lettered)".
	unplanned map[string]*dupCount
	err       error
}

// checkDuplicates counts duplicate attempts of the runtime's jobs, by
// phase; see duplicates.
func checkDuplicates(ctx context.Context, conn *pgx.Conn, w *watch) duplicates {
	d := duplicates{unplanned: map[string]*dupCount{}}
	add := func(c *dupCount, at *time.Time) {
		if at != nil && w.nearRestart(*at) {
			c.near++
		} else {
			c.away++ // no time: counted against the run
		}
	}
	scan := func(sql string, fn func(kind string, at *time.Time)) error {
		rows, err := conn.Query(ctx, sql)
		if err != nil {
			return err
		}
		var kind string
		var at *time.Time
		_, err = pgx.ForEachRow(rows, []any{&kind, &at}, func() error { fn(kind, at); return nil })
		return err
	}
	d.err = scan(`SELECT '', (array_agg(at ORDER BY at))[2] FROM soak_effects
		GROUP BY job_id, attempt HAVING count(*) > 1`, func(_ string, at *time.Time) { add(&d.twice, at) })
	if d.err == nil {
		d.err = scan(`SELECT '', least(
		        (SELECT min(s.at) FROM soak_effects s WHERE s.job_id = q.id AND s.attempt = n.n),
		        (SELECT min(e.occurred_at) FROM job_events e WHERE e.organization_id = q.organization_id AND e.job_id = q.id AND e.run_number = q.run_number AND e.attempt = n.n))
		    FROM job_queue q CROSS JOIN LATERAL generate_series(2, q.attempt) AS n(n)
		    WHERE q.job_type = 'soak.work'
		      AND NOT EXISTS (SELECT 1 FROM job_events e WHERE e.organization_id = q.organization_id AND e.job_id = q.id AND e.run_number = q.run_number
		                      AND e.attempt = n.n - 1 AND e.event_type = 'RETRY_SCHEDULED')`,
			func(_ string, at *time.Time) { add(&d.unended, at) })
	}
	if d.err == nil {
		d.err = scan(`SELECT coalesce(e.payload->>'failure_kind', '?')
		        || CASE WHEN e.event_type = 'DEAD_LETTERED' THEN ' (dead-lettered)' ELSE '' END, e.occurred_at
		    FROM job_events e JOIN job_queue q ON q.organization_id = e.organization_id AND q.id = e.job_id
		    WHERE q.job_type = 'soak.work'
		      AND (e.event_type = 'RETRY_SCHEDULED'
		           OR (e.event_type = 'DEAD_LETTERED' AND e.payload->>'failure_kind' = 'LEASE_EXPIRED'))
		      AND NOT (q.payload->>'kind' = 'retry' AND e.attempt = 1 AND e.payload->>'failure_kind' = 'RETRYABLE')
		      AND NOT (q.payload->>'kind' = 'timeout' AND e.payload->>'failure_kind' = 'TIMEOUT')`,
			func(kind string, at *time.Time) {
				c := d.unplanned[kind]
				if c == nil {
					c = &dupCount{}
					d.unplanned[kind] = c
				}
				add(c, at)
			})
	}
	return d
}

// recoveryDeadLetter is the key of duplicates.unplanned for jobs that
// lease recovery dead-lettered.
const recoveryDeadLetter = "LEASE_EXPIRED (dead-lettered)"
