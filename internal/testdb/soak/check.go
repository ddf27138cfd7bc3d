package main

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// checkResult is one invariant: how many rows break it.
type checkResult struct {
	name       string
	violations int64
	note       string
}

// invariants are the ledger checks, each a count of the rows that break
// it, which must be zero. soak_acks holds what the clients were told.
var invariants = []struct{ name, sql string }{
	{"duplicate replays: (source, run, key) with more than one lineage row", `
		SELECT count(*) FROM (
		    SELECT 1 FROM job_replays
		    GROUP BY source_job_id, source_run_number, replay_request_key HAVING count(*) > 1) d`},
	{"a (source, key) answered with two different replays", `
		SELECT count(*) FROM (
		    SELECT 1 FROM soak_acks WHERE kind = 'replay'
		    GROUP BY source_id, key HAVING count(DISTINCT job_id) > 1) d`},
	{"replay jobs (lineage rows) without exactly one ENQUEUED event", `
		SELECT count(*) FROM job_replays r
		LEFT JOIN (SELECT job_id, count(*) AS n FROM job_events WHERE event_type = 'ENQUEUED' GROUP BY job_id) e
		    ON e.job_id = r.replay_job_id
		WHERE coalesce(e.n, 0) <> 1`},
	{"replay jobs (ENQUEUED event naming a source) without exactly one matching lineage row", `
		SELECT count(*) FROM job_events e
		WHERE e.event_type = 'ENQUEUED' AND e.payload ? 'replayed_from_job_id'
		  AND (SELECT count(*) FROM job_replays r
		       WHERE r.replay_job_id = e.job_id
		         AND r.source_job_id = (e.payload->>'replayed_from_job_id')::uuid
		         AND r.source_run_number = (e.payload->>'replayed_from_run_number')::int
		         AND r.replay_request_key = e.payload->>'replay_request_key'
		         AND r.reason = e.payload->>'reason') <> 1`},
	{"lineage rows without their replay job", `
		SELECT count(*) FROM job_replays r WHERE NOT EXISTS (SELECT 1 FROM job_queue q WHERE q.id = r.replay_job_id)`},
	{"acknowledged replays whose lineage row is missing or differs (source, run 1, key, replay)", `
		SELECT count(*) FROM (SELECT DISTINCT job_id, source_id, key FROM soak_acks WHERE kind = 'replay') a
		WHERE NOT EXISTS (SELECT 1 FROM job_replays r
		    WHERE r.replay_job_id = a.job_id AND r.source_job_id = a.source_id
		      AND r.source_run_number = 1 AND r.replay_request_key = a.key)`},
	{"acknowledged jobs (enqueued or replayed) missing from job_queue: lost", `
		SELECT count(*) FROM (SELECT DISTINCT job_id FROM soak_acks WHERE kind IN ('enqueued', 'replay', 'work_enqueued')) a
		WHERE NOT EXISTS (SELECT 1 FROM job_queue q WHERE q.id = a.job_id)`},
	{"acknowledged completions not SUCCEEDED with exactly one SUCCEEDED event", `
		SELECT count(*) FROM (SELECT DISTINCT job_id FROM soak_acks WHERE kind = 'completed') a
		LEFT JOIN job_queue q ON q.id = a.job_id
		LEFT JOIN (SELECT job_id, count(*) AS n FROM job_events WHERE event_type = 'SUCCEEDED' GROUP BY job_id) e
		    ON e.job_id = a.job_id
		WHERE q.id IS NULL OR q.status <> 'SUCCEEDED' OR coalesce(e.n, 0) <> 1`},
	{"acknowledged dead-letters not DEAD_LETTERED with exactly one DEAD_LETTERED event", `
		SELECT count(*) FROM (SELECT DISTINCT job_id FROM soak_acks WHERE kind = 'dead') a
		LEFT JOIN job_queue q ON q.id = a.job_id
		LEFT JOIN (SELECT job_id, count(*) AS n FROM job_events WHERE event_type = 'DEAD_LETTERED' GROUP BY job_id) e
		    ON e.job_id = a.job_id
		WHERE q.id IS NULL OR q.status <> 'DEAD_LETTERED' OR coalesce(e.n, 0) <> 1`},
	{"jobs without exactly one ENQUEUED event", `
		SELECT count(*) FROM job_queue q
		LEFT JOIN (SELECT job_id, count(*) AS n FROM job_events WHERE event_type = 'ENQUEUED' GROUP BY job_id) e
		    ON e.job_id = q.id
		WHERE coalesce(e.n, 0) <> 1`},
	{"jobs no client was told about that are keyed or replays (only an unkeyed enqueue can land unacknowledged)", `
		SELECT count(*) FROM job_queue q
		WHERE NOT EXISTS (SELECT 1 FROM soak_acks a WHERE a.job_id = q.id AND a.kind IN ('enqueued', 'replay'))
		  AND (q.idempotency_key IS NOT NULL OR EXISTS (SELECT 1 FROM job_replays r WHERE r.replay_job_id = q.id))`},
	// The worker runtime's jobs (workType): soak_effects holds the side
	// effect of every attempt whose handler got as far.
	{"worker jobs acknowledged enqueued that are missing or not in their kind's final state (SUCCEEDED; DEAD_LETTERED for terminal, panic, timeout)", `
		SELECT count(*) FROM (SELECT DISTINCT job_id, key FROM soak_acks WHERE kind = 'work_enqueued') a
		LEFT JOIN job_queue q ON q.id = a.job_id
		WHERE q.id IS NULL OR q.status::text <> CASE WHEN a.key IN ('terminal', 'panic', 'timeout') THEN 'DEAD_LETTERED' ELSE 'SUCCEEDED' END`},
	{"worker jobs left PENDING or LEASED after the worker drained and shut down", `
		SELECT count(*) FROM job_queue WHERE job_type = 'soak.work' AND status IN ('PENDING', 'LEASED')`},
	{"SUCCEEDED worker jobs without exactly one SUCCEEDED event, at their final attempt", `
		SELECT count(*) FROM job_queue q
		WHERE q.job_type = 'soak.work' AND q.status = 'SUCCEEDED'
		  AND (SELECT count(*) FILTER (WHERE e.attempt = q.attempt AND e.run_number = q.run_number) || '/' || count(*)
		       FROM job_events e WHERE e.organization_id = q.organization_id AND e.job_id = q.id AND e.event_type = 'SUCCEEDED') <> '1/1'`},
	{"worker jobs not SUCCEEDED that have a SUCCEEDED event", `
		SELECT count(*) FROM job_queue q
		WHERE q.job_type = 'soak.work' AND q.status <> 'SUCCEEDED'
		  AND EXISTS (SELECT 1 FROM job_events e WHERE e.organization_id = q.organization_id AND e.job_id = q.id AND e.event_type = 'SUCCEEDED')`},
	{"worker attempts whose handler ran twice (more than one side effect for a job and attempt)", `
		SELECT count(*) FROM (SELECT 1 FROM soak_effects GROUP BY job_id, attempt HAVING count(*) > 1) d`},
	{"SUCCEEDED worker jobs without exactly one side effect at their final attempt", `
		SELECT count(*) FROM job_queue q
		WHERE q.job_type = 'soak.work' AND q.status = 'SUCCEEDED'
		  AND (SELECT count(*) FROM soak_effects s WHERE s.job_id = q.id AND s.attempt = q.attempt) <> 1`},
	// A job on its last attempt whose lease runs out (the restart outlasts
	// the 2 s lease) is dead-lettered by recovery, LEASE_EXPIRED, which no
	// worker reports: allowed here, and counted by phase in
	// checkDuplicates (it fails the soak away from the restart).
	{"DEAD_LETTERED worker jobs without exactly one DEAD_LETTERED event of their kind's failure (TERMINAL, PANICKED, TIMEOUT) or of recovery (LEASE_EXPIRED)", `
		SELECT count(*) FROM job_queue q
		JOIN (SELECT DISTINCT job_id, key FROM soak_acks WHERE kind = 'work_enqueued') a ON a.job_id = q.id
		WHERE q.status = 'DEAD_LETTERED'
		  AND (SELECT count(*) FILTER (WHERE e.payload->>'failure_kind' = 'LEASE_EXPIRED'
		                                  OR e.payload->>'failure_kind' = CASE a.key WHEN 'terminal' THEN 'TERMINAL'
		                                   WHEN 'panic' THEN 'PANICKED' WHEN 'timeout' THEN 'TIMEOUT' END) || '/' || count(*)
		       FROM job_events e WHERE e.job_id = q.id AND e.event_type = 'DEAD_LETTERED') <> '1/1'`},
	{"worker jobs in a final state the worker did not report exactly once (OnFinished: succeeded, dead-lettered; recovery's dead-letters aside)", `
		SELECT count(*) FROM job_queue q
		WHERE q.job_type = 'soak.work' AND q.status IN ('SUCCEEDED', 'DEAD_LETTERED')
		  AND NOT EXISTS (SELECT 1 FROM job_events e WHERE e.job_id = q.id AND e.event_type = 'DEAD_LETTERED'
		                  AND e.payload->>'failure_kind' = 'LEASE_EXPIRED')
		  AND (SELECT count(*) FROM soak_acks a WHERE a.job_id = q.id
		       AND a.kind = CASE q.status WHEN 'SUCCEEDED' THEN 'work_succeeded' ELSE 'work_dead' END) <> 1`},
	{"worker reports (OnFinished succeeded, dead-lettered) of a job not in that state", `
		SELECT count(*) FROM soak_acks a LEFT JOIN job_queue q ON q.id = a.job_id
		WHERE (a.kind = 'work_succeeded' AND q.status IS DISTINCT FROM 'SUCCEEDED')
		   OR (a.kind = 'work_dead' AND q.status IS DISTINCT FROM 'DEAD_LETTERED')`},
	{"execution resource claims held for a job that does not hold that lease", `
		SELECT count(*) FROM job_execution_resource_claims c
		LEFT JOIN job_queue q ON q.id = c.job_id
		WHERE c.release_after IS NULL
		  AND (q.id IS NULL OR q.status <> 'LEASED' OR q.run_number <> c.run_number OR q.attempt <> c.attempt)`},
}

// checkLedger loads the acknowledgements into a temp table and runs the
// invariants, recording results and failures in rep.
func checkLedger(ctx context.Context, url string, acks *ackLog, st *stats, rep *report, w *watch) {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		rep.fail("check: %v", err)
		return
	}
	cfg.RuntimeParams["application_name"] = "soak-check"
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		rep.fail("check: connect: %v", err)
		return
	}
	defer conn.Close(context.Background())

	// The client pool is closed: its backends must go away.
	var left int64
	deadline := time.Now().Add(10 * time.Second)
	for {
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1`, appClients).Scan(&left); err != nil {
			rep.fail("check: %v", err)
			return
		}
		if left == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	rep.checks = append(rep.checks, checkResult{name: "client backends left on the server after the pool closed", violations: left})

	if _, err := conn.Exec(ctx, `CREATE TEMP TABLE soak_acks (kind text NOT NULL, job_id uuid NOT NULL, source_id uuid, key text)`); err != nil {
		rep.fail("check: %v", err)
		return
	}
	var batch [][]any
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		_, err := conn.CopyFrom(ctx, pgx.Identifier{"soak_acks"}, []string{"kind", "job_id", "source_id", "key"}, pgx.CopyFromRows(batch))
		batch = batch[:0]
		return err
	}
	err = acks.each(func(a ack) error {
		var src, key any
		if a.source != uuid.Nil {
			src = a.source
		}
		if a.key != "" {
			key = a.key
		}
		batch = append(batch, []any{a.kind, a.job, src, key})
		if len(batch) == 10000 {
			return flush()
		}
		return nil
	})
	if err == nil {
		err = flush()
	}
	if err == nil {
		_, err = conn.Exec(ctx, `CREATE INDEX ON soak_acks (job_id); ANALYZE soak_acks`)
	}
	if err != nil {
		rep.fail("check: load acknowledgements: %v", err)
		return
	}
	rs, err := conn.Query(ctx, `SELECT kind, count(*) FROM soak_acks GROUP BY kind`)
	if err != nil {
		rep.fail("check: %v", err)
		return
	}
	loaded := map[string]int64{}
	var kind string
	var n int64
	if _, err := pgx.ForEachRow(rs, []any{&kind, &n}, func() error { loaded[kind] = n; return nil }); err != nil {
		rep.fail("check: %v", err)
		return
	}
	for k, want := range acks.counts {
		if loaded[k] != want {
			rep.fail("check: %d %s acknowledgements loaded, the clients made %d", loaded[k], k, want)
		}
	}
	rep.acks = acks.counts

	for _, inv := range invariants {
		var n int64
		if err := conn.QueryRow(ctx, inv.sql).Scan(&n); err != nil {
			rep.fail("check %q: %v", inv.name, err)
			continue
		}
		rep.checks = append(rep.checks, checkResult{name: inv.name, violations: n})
	}

	// Jobs nobody was told about: bounded by the unkeyed enqueue attempts
	// that failed (each may have landed with its reply lost).
	var unacked int64
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM job_queue q
		WHERE NOT EXISTS (SELECT 1 FROM soak_acks a WHERE a.job_id = q.id AND a.kind IN ('enqueued', 'replay', 'work_enqueued'))`).Scan(&unacked); err != nil {
		rep.fail("check: %v", err)
	} else {
		st.mu.Lock()
		bound := st.unkeyedLost
		st.mu.Unlock()
		over := unacked - bound
		if over < 0 {
			over = 0
		}
		rep.checks = append(rep.checks, checkResult{
			name:       "jobs no client was told about, beyond the unkeyed enqueue attempts that failed",
			violations: over,
			note:       fmt.Sprintf("%d such jobs; %d unkeyed enqueue attempts failed", unacked, bound),
		})
	}

	rep.dups = checkDuplicates(ctx, conn, w)
	if rep.dups.err != nil {
		rep.fail("check: duplicate attempts: %v", rep.dups.err)
	}

	if err := conn.QueryRow(ctx, `SELECT coalesce(string_agg(k || ' ' || s, ', ' ORDER BY k, s), '') FROM (
		    SELECT a.key || ':' || q.status AS k, count(*) AS s FROM (SELECT DISTINCT job_id, key FROM soak_acks WHERE kind = 'work_enqueued') a
		    JOIN job_queue q ON q.id = a.job_id GROUP BY 1) x`).Scan(&rep.final.work); err != nil {
		rep.fail("check: %v", err)
	}
	if err := conn.QueryRow(ctx, `SELECT (SELECT count(*) FROM soak_effects),
		    (SELECT count(*) FROM job_queue WHERE job_type = 'soak.work' AND attempt > 1),
		    (SELECT count(*) FROM job_events e JOIN job_queue q ON q.id = e.job_id
		     WHERE q.job_type = 'soak.work' AND e.event_type = 'PROGRESS')`).
		Scan(&rep.final.effects, &rep.final.workRetried, &rep.final.workProgress); err != nil {
		rep.fail("check: %v", err)
	}
	if err := conn.QueryRow(ctx, `SELECT
		    (SELECT count(*) FROM job_queue), (SELECT count(*) FROM job_events), (SELECT count(*) FROM job_replays),
		    (SELECT string_agg(status::text || ' ' || n, ', ' ORDER BY status)
		     FROM (SELECT status, count(*) AS n FROM job_queue GROUP BY status) s)`).
		Scan(&rep.final.jobs, &rep.final.events, &rep.final.replays, &rep.final.statuses); err != nil {
		rep.fail("check: %v", err)
	}
}
