package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/inspect"
	"github.com/runledger-go/runledger/jobs"
	"github.com/runledger-go/runledger/lease"
	"github.com/runledger-go/runledger/replay"
)

// Operation kinds, as the report names them.
const (
	opDefinition    = "definition upsert (same settings)"
	opEnqueue       = "enqueue, unkeyed"
	opEnqueueKeyed  = "enqueue, keyed, new key"
	opEnqueueRepeat = "enqueue, keyed, same request again (existing)"
	opClaim         = "claim (1 to 4 jobs)"
	opComplete      = "complete"
	opFail          = "fail"
	opFailRetry     = "fail, retry scheduled"
	opFailDead      = "fail, dead-lettered"
	opReplay        = "replay, new key"
	opReplayRepeat  = "replay, same key and reason again (existing)"
	opGet           = "get"
	opRecover       = "recover expired leases"

	// Counters that are not operations.
	cntClaimed       = "  jobs leased by claims"
	cntClaimEmpty    = "  claims that found no due job"
	cntRecovered     = "  jobs taken back by recovery"
	cntReadBack      = "  finishes that landed although their reply was lost (read back)"
	cntKeyedExisting = "  new keys answered existing after a retried attempt had landed"
	cntReplayLanded  = "  new replay keys answered existing after a retried attempt had landed"
)

// reportOrder lists operations and counters in the order the report
// shows them (counters, indented, below the operation they belong to).
var reportOrder = []string{
	opDefinition, opEnqueue, opEnqueueKeyed, cntKeyedExisting, opEnqueueRepeat,
	opClaim, cntClaimed, cntClaimEmpty, opComplete, opFailRetry, opFailDead, cntReadBack,
	opReplay, cntReplayLanded, opReplayRepeat, opGet, opRecover, cntRecovered,
	opWorkEnqueue, opWorkSucceeded, opWorkRetried, opWorkDead, cntWorkLost,
}

// opTimeout bounds one operation with all its retries: longer than any
// restart takes, short enough that a hung call shows up as a failure.
const opTimeout = 2 * time.Minute

// The tenants jobs are spread over: global and two organizations.
var scopes = []runledger.Scope{
	runledger.Global(),
	runledger.Organization(uuid.MustParse("0190a5d0-0000-7000-8000-00000000a001")),
	runledger.Organization(uuid.MustParse("0190a5d0-0000-7000-8000-00000000a002")),
}

// A client's memory of earlier results, bounded (rings), for repeats and
// reads.
type (
	jobRef struct {
		id    uuid.UUID
		scope runledger.Scope
	}
	keyedReq struct {
		req jobs.EnqueueRequest
		id  uuid.UUID
	}
	replayReq struct {
		req      replay.Request
		replayID uuid.UUID
	}
	sourceRef struct {
		id    uuid.UUID
		scope runledger.Scope
		run   int32
	}
)

// ring keeps the last len(items) values put.
type ring[T any] struct {
	items []T
	next  int
	full  bool
}

func newRing[T any](n int) *ring[T] { return &ring[T]{items: make([]T, n)} }

func (r *ring[T]) put(v T) {
	r.items[r.next] = v
	r.next = (r.next + 1) % len(r.items)
	if r.next == 0 {
		r.full = true
	}
}

func (r *ring[T]) pick(rng *rand.Rand) (T, bool) {
	n := r.next
	if r.full {
		n = len(r.items)
	}
	if n == 0 {
		var zero T
		return zero, false
	}
	return r.items[rng.Intn(n)], true
}

// client is one of the soak's concurrent workers: it both produces and
// consumes jobs, with a worker id of its own.
type client struct {
	id     int
	worker string
	pool   *pgxpool.Pool
	st     *stats
	acks   *ackLog
	lease  time.Duration
	rng    *rand.Rand
	seq    int

	recent  *ring[jobRef]
	keyed   *ring[keyedReq]
	replays *ring[replayReq]
	sources *ring[sourceRef]
}

func newClient(id int, pool *pgxpool.Pool, st *stats, acks *ackLog, lease time.Duration) *client {
	return &client{
		id: id, worker: fmt.Sprintf("soak-worker-%02d", id), pool: pool, st: st, acks: acks, lease: lease,
		rng:    rand.New(rand.NewSource(int64(id) + 1)),
		recent: newRing[jobRef](64), keyed: newRing[keyedReq](64),
		replays: newRing[replayReq](64), sources: newRing[sourceRef](256),
	}
}

// clientTypes are the job types clients claim: the worker runtime's
// (workType) are its own.
var clientTypes = []string{jobTypes[0].name, jobTypes[1].name}

// weights of the steps, out of 100.
var steps = []struct {
	weight int
	run    func(*client)
}{
	{20, (*client).enqueue},
	{10, (*client).enqueueKeyed},
	{4, (*client).enqueueRepeat},
	{40, (*client).claimAndFinish},
	{10, (*client).replayNew},
	{5, (*client).replayRepeat},
	{8, (*client).get},
	{1, (*client).upsertDefinition},
	{2, (*client).recover},
}

// loop runs steps back to back until ctx ends; the step in flight then
// finishes (a claimed job is always completed or failed).
func (c *client) loop(ctx context.Context) {
	total := 0
	for _, s := range steps {
		total += s.weight
	}
	for ctx.Err() == nil {
		n := c.rng.Intn(total)
		for _, s := range steps {
			if n < s.weight {
				s.run(c)
				break
			}
			n -= s.weight
		}
	}
}

// do runs fn until it succeeds or fails with an error that is not
// retryable, retrying the same request after a transient error or an
// unconfirmed commit (backing off from 5 ms to 200 ms). It returns how many
// attempts failed and the final error.
func (c *client) do(op string, fn func(context.Context) error) (failed int, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	backoff := 5 * time.Millisecond
	for {
		err = fn(ctx)
		if err == nil {
			return failed, nil
		}
		class := classify(err)
		if class == "" || ctx.Err() != nil {
			return failed, err
		}
		failed++
		c.st.retryable(op, class, cause(err), time.Now())
		time.Sleep(backoff)
		if backoff < 200*time.Millisecond {
			backoff *= 2
		}
	}
}

func (c *client) newRequest(keyed bool) jobs.EnqueueRequest {
	c.seq++
	jt := jobTypes[c.rng.Intn(len(jobTypes))].name
	payload, _ := json.Marshal(map[string]any{"client": c.id, "n": c.seq, "to": fmt.Sprintf("user-%d@example.com", c.seq)})
	req := jobs.EnqueueRequest{Scope: scopes[c.rng.Intn(len(scopes))], JobType: jt, Payload: payload}
	if c.rng.Intn(10) == 0 {
		req.ExecutionResourceKey = fmt.Sprintf("soak-resource-%d", c.rng.Intn(8))
	}
	if keyed {
		req.IdempotencyKey = fmt.Sprintf("c%02d-e%d", c.id, c.seq)
	}
	return req
}

func (c *client) enqueue() {
	req := c.newRequest(false)
	var res jobs.EnqueueResult
	failed, err := c.do(opEnqueue, func(ctx context.Context) (err error) {
		res, err = jobs.Enqueue(ctx, c.pool, req)
		return err
	})
	c.st.mu.Lock()
	c.st.unkeyedLost += int64(failed)
	c.st.mu.Unlock()
	if err != nil {
		c.st.failure("%s: %s", opEnqueue, describe(err))
		return
	}
	if res.Disposition != runledger.DispositionInserted {
		c.st.failure("%s: disposition %s, want inserted", opEnqueue, res.Disposition)
		return
	}
	c.acks.add(ack{kind: ackEnqueued, job: res.Job.ID})
	c.recent.put(jobRef{res.Job.ID, req.Scope})
	c.st.op(opEnqueue)
}

func (c *client) enqueueKeyed() {
	req := c.newRequest(true)
	var res jobs.EnqueueResult
	failed, err := c.do(opEnqueueKeyed, func(ctx context.Context) (err error) {
		res, err = jobs.Enqueue(ctx, c.pool, req)
		return err
	})
	if err != nil {
		c.st.failure("%s %s: %s", opEnqueueKeyed, req.IdempotencyKey, describe(err))
		return
	}
	switch {
	case res.Disposition == runledger.DispositionInserted:
	case failed > 0:
		c.st.opN(cntKeyedExisting, 1)
	default:
		c.st.failure("%s %s: existing at the first attempt (the key is new)", opEnqueueKeyed, req.IdempotencyKey)
		return
	}
	c.acks.add(ack{kind: ackEnqueued, job: res.Job.ID})
	c.keyed.put(keyedReq{req, res.Job.ID})
	c.recent.put(jobRef{res.Job.ID, req.Scope})
	c.st.op(opEnqueueKeyed)
}

func (c *client) enqueueRepeat() {
	k, ok := c.keyed.pick(c.rng)
	if !ok {
		c.enqueueKeyed()
		return
	}
	var res jobs.EnqueueResult
	_, err := c.do(opEnqueueRepeat, func(ctx context.Context) (err error) {
		res, err = jobs.Enqueue(ctx, c.pool, k.req)
		return err
	})
	if err != nil {
		c.st.failure("%s %s: %s", opEnqueueRepeat, k.req.IdempotencyKey, describe(err))
		return
	}
	if res.Disposition != runledger.DispositionExisting || res.Job.ID != k.id {
		c.st.failure("%s %s: %s job %s, want existing job %s", opEnqueueRepeat, k.req.IdempotencyKey, res.Disposition, res.Job.ID, k.id)
		return
	}
	c.acks.add(ack{kind: ackEnqueued, job: res.Job.ID})
	c.st.op(opEnqueueRepeat)
}

func (c *client) claimAndFinish() {
	req := lease.ClaimRequest{WorkerID: c.worker, JobTypes: clientTypes, Limit: 1 + c.rng.Intn(4), Lease: c.lease}
	var claimed []runledger.Job
	_, err := c.do(opClaim, func(ctx context.Context) (err error) {
		claimed, err = lease.Claim(ctx, c.pool, req)
		return err
	})
	if err != nil {
		c.st.failure("%s: %s", opClaim, describe(err))
		return
	}
	c.st.op(opClaim)
	if len(claimed) == 0 {
		c.st.opN(cntClaimEmpty, 1)
		return
	}
	c.st.opN(cntClaimed, int64(len(claimed)))
	for _, j := range claimed {
		switch r := c.rng.Intn(100); {
		case r < 75:
			c.complete(j)
		case r < 95:
			c.fail(j, false)
		default:
			c.fail(j, true)
		}
	}
}

func (c *client) complete(j runledger.Job) {
	req := lease.CompleteRequest{JobID: j.ID, RunNumber: j.RunNumber, Attempt: j.Attempt, WorkerID: c.worker,
		Output: json.RawMessage(`{"ok":true}`)}
	failed, err := c.do(opComplete, func(ctx context.Context) (err error) {
		_, err = lease.Complete(ctx, c.pool, req)
		return err
	})
	if err != nil && failed > 0 && errors.Is(err, runledger.CodeLeaseMismatch) {
		// An earlier attempt may have completed the job before its
		// reply was lost: read it back.
		var got runledger.Job
		_, rerr := c.do(opGet, func(ctx context.Context) (err error) {
			got, err = inspect.Get(ctx, c.pool, j.Scope(), j.ID)
			return err
		})
		if rerr == nil && got.Status == runledger.JobStatusSucceeded && got.RunNumber == j.RunNumber && got.Attempt == j.Attempt {
			c.st.opN(cntReadBack, 1)
			err = nil
		}
	}
	if err != nil {
		c.st.failure("%s %s: %s", opComplete, j.ID, describe(err))
		return
	}
	c.acks.add(ack{kind: ackCompleted, job: j.ID})
	c.sources.put(sourceRef{j.ID, j.Scope(), j.RunNumber})
	c.st.op(opComplete)
}

func (c *client) fail(j runledger.Job, terminal bool) {
	zero := time.Duration(0)
	req := lease.FailRequest{JobID: j.ID, RunNumber: j.RunNumber, Attempt: j.Attempt, WorkerID: c.worker,
		ErrorCode: "soak.simulated", ErrorMessage: "simulated failure", Terminal: terminal, RetryDelay: &zero}
	var got runledger.Job
	failed, err := c.do(opFail, func(ctx context.Context) (err error) {
		got, err = lease.Fail(ctx, c.pool, req)
		return err
	})
	dead := err == nil && got.Status == runledger.JobStatusDeadLettered
	if err != nil && failed > 0 && errors.Is(err, runledger.CodeLeaseMismatch) {
		// An earlier attempt may have landed: look for its event.
		var events []runledger.JobEvent
		_, rerr := c.do(opGet, func(ctx context.Context) (err error) {
			events, err = inspect.Events(ctx, c.pool, j.Scope(), j.ID)
			return err
		})
		for _, e := range events {
			if rerr == nil && e.RunNumber == j.RunNumber && e.Attempt != nil && *e.Attempt == j.Attempt &&
				(e.EventType == runledger.JobEventRetryScheduled || e.EventType == runledger.JobEventDeadLettered) {
				c.st.opN(cntReadBack, 1)
				dead = e.EventType == runledger.JobEventDeadLettered
				err = nil
			}
		}
	}
	if err != nil {
		c.st.failure("fail %s: %s", j.ID, describe(err))
		return
	}
	if terminal && !dead {
		c.st.failure("fail %s (terminal): status %s, want DEAD_LETTERED", j.ID, got.Status)
		return
	}
	if dead {
		c.acks.add(ack{kind: ackDead, job: j.ID})
		c.st.op(opFailDead)
		return
	}
	c.st.op(opFailRetry)
}

func (c *client) replayNew() {
	src, ok := c.sources.pick(c.rng)
	if !ok {
		c.enqueue()
		return
	}
	c.seq++
	key := fmt.Sprintf("c%02d-r%d", c.id, c.seq)
	req := replay.Request{Scope: src.scope, SourceJobID: src.id, ExpectedRunNumber: src.run, Key: key, Reason: "soak replay " + key}
	var out replay.Outcome
	failed, err := c.do(opReplay, func(ctx context.Context) (err error) {
		out, err = replay.SucceededJob(ctx, c.pool, req)
		return err
	})
	if err != nil {
		c.st.failure("%s %s/%s: %s", opReplay, src.id, key, describe(err))
		return
	}
	got, ok := out.(replay.Replayed)
	if !ok {
		c.st.failure("%s %s/%s: outcome %T, want Replayed (the source is SUCCEEDED at run %d)", opReplay, src.id, key, out, src.run)
		return
	}
	switch {
	case got.Disposition == runledger.DispositionInserted:
	case failed > 0:
		c.st.opN(cntReplayLanded, 1)
	default:
		c.st.failure("%s %s/%s: existing at the first attempt (the key is new)", opReplay, src.id, key)
		return
	}
	c.acks.add(ack{kind: ackReplay, job: got.Replay.JobID, source: src.id, key: key})
	c.replays.put(replayReq{req, got.Replay.JobID})
	c.recent.put(jobRef{got.Replay.JobID, src.scope})
	c.st.op(opReplay)
}

func (c *client) replayRepeat() {
	r, ok := c.replays.pick(c.rng)
	if !ok {
		c.replayNew()
		return
	}
	var out replay.Outcome
	_, err := c.do(opReplayRepeat, func(ctx context.Context) (err error) {
		out, err = replay.SucceededJob(ctx, c.pool, r.req)
		return err
	})
	if err != nil {
		c.st.failure("%s %s/%s: %s", opReplayRepeat, r.req.SourceJobID, r.req.Key, describe(err))
		return
	}
	got, ok := out.(replay.Replayed)
	if !ok || got.Disposition != runledger.DispositionExisting || got.Replay.JobID != r.replayID {
		c.st.failure("%s %s/%s: %#v, want Existing replay %s", opReplayRepeat, r.req.SourceJobID, r.req.Key, out, r.replayID)
		return
	}
	c.acks.add(ack{kind: ackReplay, job: got.Replay.JobID, source: r.req.SourceJobID, key: r.req.Key})
	c.st.op(opReplayRepeat)
}

func (c *client) get() {
	ref, ok := c.recent.pick(c.rng)
	if !ok {
		c.enqueue()
		return
	}
	_, err := c.do(opGet, func(ctx context.Context) error {
		_, err := inspect.Get(ctx, c.pool, ref.scope, ref.id)
		return err
	})
	if err != nil {
		c.st.failure("%s %s: %s", opGet, ref.id, describe(err))
		return
	}
	c.st.op(opGet)
}

func (c *client) upsertDefinition() {
	in := definitionInput(jobTypes[c.rng.Intn(len(jobTypes))].name)
	var d jobs.Definition
	_, err := c.do(opDefinition, func(ctx context.Context) (err error) {
		d, err = jobs.UpsertDefinition(ctx, c.pool, in)
		return err
	})
	if err != nil {
		c.st.failure("%s %s: %s", opDefinition, in.JobType, describe(err))
		return
	}
	if d.Version != 1 {
		c.st.failure("%s %s: version %d, want 1 (the settings never change)", opDefinition, in.JobType, d.Version)
		return
	}
	c.st.op(opDefinition)
}

func (c *client) recover() {
	var got []runledger.Job
	_, err := c.do(opRecover, func(ctx context.Context) (err error) {
		got, err = lease.RecoverExpiredLeases(ctx, c.pool, 100)
		return err
	})
	if err != nil {
		c.st.failure("%s: %s", opRecover, describe(err))
		return
	}
	c.st.op(opRecover)
	c.st.opN(cntRecovered, int64(len(got)))
}
