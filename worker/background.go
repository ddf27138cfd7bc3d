package worker

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/runledger-go/runledger/health"
	"github.com/runledger-go/runledger/lease"
)

// closeConn closes a connection, bounded by a second.
func closeConn(c *pgx.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = c.Close(ctx)
}

// heartbeat renews every lease the worker holds, once per interval, until
// stop is closed.
func (r *run) heartbeat(stop <-chan struct{}) {
	t := time.NewTicker(r.cfg.HeartbeatInterval)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		r.beat()
	}
}

// beat sends one round of heartbeats: every held lease, up to 1,000 per
// statement, sorted by tenant then job id (the order every write of the
// worker locks rows in: see flush), with the progress and checkpoints
// handlers reported since the last round. A refused lease cancels its
// handler; when the database cannot be reached, a lease whose end has
// passed is given up as well.
//
// The lease of an attempt whose outcome waits for its commit is renewed
// for one lease length after the handler returned, no longer: an outcome
// that cannot be written by then lets its lease run out, so that a
// recovery takes the job back rather than the worker holding it forever.
func (r *run) beat() {
	now := time.Now()
	r.mu.Lock()
	held := make([]*execution, 0, len(r.active))
	for _, e := range r.active {
		if e.lost.Load() {
			continue
		}
		e.mu.Lock()
		stale := !e.settledAt.IsZero() && now.Sub(e.settledAt) > r.cfg.Lease
		e.mu.Unlock()
		if !stale {
			held = append(held, e)
		}
	}
	r.mu.Unlock()
	sortByLease(held)
	for len(held) > 0 {
		n := min(len(held), maxClaim)
		batch := held[:n]
		held = held[n:]
		reqs := make([]lease.HeartbeatRequest, n)
		versions := make([]int, n)
		// The round may take until the last of its leases ends: past that
		// every lease it carries is gone anyway. Without a deadline, a
		// network that stops answering would hold the round (and the
		// handlers, never given up) forever.
		var until time.Time
		for i, e := range batch {
			e.mu.Lock()
			if e.leaseUntil.After(until) {
				until = e.leaseUntil
			}
			reqs[i] = lease.HeartbeatRequest{Scope: &e.scope, JobID: e.job.ID, RunNumber: e.job.RunNumber, Attempt: e.job.Attempt,
				WorkerID: r.cfg.WorkerID, Lease: r.cfg.Lease}
			if e.dirty {
				reqs[i].ProgressDone, reqs[i].ProgressTotal, reqs[i].Checkpoint = e.progressDone, e.progressTotal, e.checkpoint
			}
			versions[i] = e.version
			e.mu.Unlock()
		}
		sent := time.Now()
		ctx, cancel := r.bounded(until)
		results, err := lease.HeartbeatMany(ctx, r.pool, reqs)
		cancel()
		if err != nil {
			r.log.Warn("runledger worker: heartbeat failed", "worker", r.fp, "leases", n, "err", err)
			now := time.Now()
			for _, e := range batch {
				if now.After(e.leaseEnd()) && !e.settled.Load() {
					r.loseLease(e, "its lease ran out while heartbeats failed")
				}
			}
			continue
		}
		for i, res := range results {
			e := batch[i]
			if res.Err != nil {
				// A handler that has returned is not stopped: its outcome
				// is with the committer, whose fenced write finds out
				// whether the lease still held (this refusal may be that
				// write, landed).
				if !e.settled.Load() {
					r.loseLease(e, "its heartbeat was refused")
				}
				continue
			}
			e.mu.Lock()
			e.leaseUntil = r.leaseEndFrom(sent, &res.Value.LastHeartbeatAt, &res.Value.LeaseExpiresAt)
			if e.version == versions[i] {
				e.dirty, e.checkpoint = false, nil
			}
			e.mu.Unlock()
		}
	}
}

// loseLease marks an attempt lost and cancels its handler: nothing more is
// written for it.
func (r *run) loseLease(e *execution, why string) {
	if !e.lost.CompareAndSwap(false, true) {
		return
	}
	r.log.Warn("runledger worker: stopping a job whose lease is gone", "worker", r.fp,
		"job_id", e.job.ID, "job_type", e.job.JobType, "why", why)
	e.cancel(errLeaseLost)
}

// listen holds a connection subscribed to lease.DueChannel until ctx ends
// and wakes the fetcher for every notification of a registered type, and
// after every (re)connection, to catch up on what it may have missed.
func (r *run) listen(ctx context.Context) {
	var bo backoff
	for ctx.Err() == nil {
		conn, err := r.pool.Acquire(ctx)
		if err != nil {
			if ctx.Err() == nil {
				r.log.Warn("runledger worker: cannot hold a connection to listen; polling meanwhile", "worker", r.fp, "err", err)
			}
			sleep(ctx.Done(), bo.next())
			continue
		}
		if err := lease.Listen(ctx, conn.Conn()); err != nil {
			r.log.Warn("runledger worker: LISTEN failed; polling meanwhile", "worker", r.fp, "err", err)
			closeConn(conn.Conn())
			conn.Release()
			sleep(ctx.Done(), bo.next())
			continue
		}
		bo.reset()
		r.signal()
		for {
			n, err := conn.Conn().WaitForNotification(ctx)
			if err != nil {
				break
			}
			// The payload is the due job's type; empty for a replay,
			// whose type the notifier did not know.
			if _, ok := r.handlers[n.Payload]; ok || n.Payload == "" {
				r.signal()
			}
		}
		// The connection still LISTENs: close it rather than reuse it.
		closeConn(conn.Conn())
		conn.Release()
		if ctx.Err() == nil {
			sleep(ctx.Done(), bo.next())
		}
	}
}

// recoverLeases recovers expired leases at start and every recovery
// interval until ctx ends, a batch of 1,000 at a time.
func (r *run) recoverLeases(ctx context.Context) {
	for {
		for {
			// A recovery bounded by the lease (at least 5 s, so that a
			// short lease does not starve it): one that waits longer on a
			// server that stopped answering is given up and tried again.
			callCtx, cancel := context.WithTimeout(ctx, max(r.cfg.Lease, 5*time.Second))
			rec, err := lease.RecoverExpiredLeases(callCtx, r.pool, maxClaim)
			cancel()
			if err != nil {
				if ctx.Err() == nil {
					r.log.Warn("runledger worker: lease recovery failed", "worker", r.fp, "err", err)
				}
				break
			}
			if len(rec) > 0 {
				r.log.Info("runledger worker: recovered expired leases", "worker", r.fp, "jobs", len(rec))
			}
			if len(rec) < maxClaim {
				break
			}
		}
		if !sleep(ctx.Done(), r.cfg.RecoveryInterval) {
			return
		}
	}
}

// prune runs the scheduled prune at start and every retention interval
// until ctx ends: the jobs that finished more than the retention ago, over
// every tenant, unless another worker's prune is running.
func (r *run) prune(ctx context.Context) {
	for {
		req := health.PruneRequest{OlderThan: r.cfg.Retention, BatchSize: r.cfg.RetentionBatch}
		res, ran, err := health.TryPrune(ctx, r.pool, req)
		switch {
		case err != nil && ctx.Err() == nil:
			r.log.Warn("runledger worker: scheduled prune failed", "worker", r.fp, "deleted_jobs", res.DeletedJobs, "err", err)
		case ran && res.DeletedJobs > 0:
			r.log.Info("runledger worker: pruned finished jobs", "worker", r.fp, "deleted_jobs", res.DeletedJobs,
				"deleted_events", res.DeletedEvents, "kept_for_lineage", res.KeptForLineage, "skipped", res.Skipped)
		}
		if r.cfg.OnPruned != nil && ran && err == nil {
			r.hook("OnPruned", func() { r.cfg.OnPruned(res) })
		}
		if !sleep(ctx.Done(), r.cfg.RetentionInterval) {
			return
		}
	}
}
