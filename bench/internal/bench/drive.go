package bench

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/replay"
)

// The bench's own Go client: the request and expected outcome of each
// path, the client loop (drive) with its progress line, and the reduction
// of a run's latencies to percentiles.

// accum adds up the rounds of one client.
type accum struct {
	res     Result
	seconds float64
	ops     int64
	errors  int64
	rate    float64 // sum of per-second rate x seconds
	lat     []time.Duration
	first   string
	held    float64 // sum of HeldMS x seconds
	cost    *costTotals
}

func (a *accum) add(r Result, lat []time.Duration) {
	a.seconds += r.Seconds
	a.ops += r.Ops
	a.errors += r.Errors
	a.rate += r.PerSecond * r.Seconds
	a.held += r.HeldMS * r.Seconds
	a.lat = append(a.lat, lat...)
	if r.cost != nil {
		if a.cost == nil {
			a.cost = &costTotals{}
		}
		a.cost.add(*r.cost)
	}
	if a.first == "" {
		a.first = r.FirstError
	}
}

func (a *accum) result() Result {
	r := a.res
	r.Seconds, r.Ops, r.Errors, r.FirstError = a.seconds, a.ops, a.errors, a.first
	if a.seconds > 0 {
		r.PerSecond = a.rate / a.seconds
		r.HeldMS = a.held / a.seconds
	}
	r.P50, r.P95, r.P99 = percentiles(a.lat)
	r.cost = nil
	if a.cost != nil {
		r.Cost = a.cost.perJob()
	}
	return r
}

// request returns the request of path for source n; seq makes a key
// unique within a run.
func request(path Path, sources int, n int64, key string) replay.Request {
	req := replay.Request{Scope: runledger.Organization(Org), SourceJobID: SourceID(n), ExpectedRunNumber: 1, Key: key, Reason: Reason}
	switch path {
	case Existing:
		req.Key, req.Reason = SeedKey, SeedKey
	case Mismatch:
		req.ExpectedRunNumber = 2
	case NotFound:
		req.SourceJobID = SourceID(int64(sources) + n)
	}
	return req
}

// expected reports whether an outcome is the one path should give.
func expected(path Path, out replay.Outcome) bool {
	switch o := out.(type) {
	case replay.Replayed:
		return (path == Inserted && o.Disposition == runledger.DispositionInserted) ||
			(path == Existing && o.Disposition == runledger.DispositionExisting)
	case replay.ExpectationMismatch:
		return path == Mismatch
	case replay.NotFound:
		return path == NotFound
	}
	return false
}

// runGo runs replay.SucceededJob from base.Clients goroutines, each with a
// connection of its own from one pool, for the warmup and then the
// measured duration.
func (b *runner) runGo(ctx context.Context, url string, base Result) (Result, []time.Duration, error) {
	res := base
	res.Client = ClientGo
	res.RoundTrips = RoundTrips[ClientGo][base.Path]
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return res, nil, err
	}
	cfg.MaxConns = int32(base.Clients)
	cfg.MinConns = int32(base.Clients)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return res, nil, err
	}
	defer pool.Close()
	// Open every connection before the clock starts.
	conns := make([]*pgxpool.Conn, base.Clients)
	for i := range conns {
		if conns[i], err = pool.Acquire(ctx); err != nil {
			return res, nil, err
		}
	}
	for _, c := range conns {
		c.Release()
	}

	// By default the calls get a context that cannot be canceled: pgx
	// starts a goroutine per round trip to watch a cancelable one, a cost
	// of the caller's choice that pgbench has no counterpart for. Workers
	// still stop between calls when ctx ends.
	callCtx := context.WithoutCancel(ctx)
	if b.opts.CancelableContext {
		callCtx = ctx
	}
	return b.drive(ctx, url, res, "go-", func(n int64, key string) error {
		req := request(base.Path, base.Sources, n, key)
		out, err := replay.SucceededJob(callCtx, pool, req)
		if err == nil && !expected(base.Path, out) {
			err = fmt.Errorf("unexpected outcome %T %+v", out, out)
		}
		return err
	})
}

// drive runs op from res.Clients goroutines for the warmup and then the
// measured duration, and returns res completed with the counts, rates
// and the latencies of the measured operations that succeeded. op gets a
// source drawn at random from 1..res.Sources and a key unique within the
// run (beginning with prefix).
//
// On loopback (no proxy), it also measures the server's cost over the
// measured time: the CPU of the database's client backends (those of
// pg_stat_activity when the measured time starts, and any that connect
// later), the WAL and its index entries, per operation.
func (b *runner) drive(ctx context.Context, url string, res Result, prefix string, op func(n int64, key string) error) (Result, []time.Duration, error) {
	runID := randomHex(4)
	start := time.Now()
	measureFrom := start.Add(b.opts.Warmup)
	end := measureFrom.Add(b.opts.Duration)
	var meter *costMeter
	var meterErr error
	meterStarted := make(chan struct{})
	if b.proxy == nil {
		startAt := time.AfterFunc(time.Until(measureFrom), func() {
			defer close(meterStarted)
			meter, meterErr = startActivityCost(ctx, url)
		})
		defer startAt.Stop()
	} else {
		close(meterStarted)
	}
	var (
		ops, errs atomic.Int64
		firstErr  atomic.Value
		wg        sync.WaitGroup
		lat       = make([][]time.Duration, res.Clients)
	)
	stop := b.showProgress(res, start, measureFrom, end, &ops)
	if b.proxy != nil {
		resetAt := time.AfterFunc(time.Until(measureFrom), b.proxy.ResetHeld)
		defer resetAt.Stop()
	}
	for w := 0; w < res.Clients; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			rng := newRand()
			mine := make([]time.Duration, 0, 1<<16)
			for seq := 0; ; seq++ {
				t0 := time.Now()
				if t0.After(end) || ctx.Err() != nil {
					break
				}
				n := 1 + rng.Int64N(int64(res.Sources))
				err := op(n, prefix+runID+"-"+strconv.Itoa(w)+"-"+strconv.Itoa(seq))
				d := time.Since(t0)
				if t0.Before(measureFrom) {
					continue
				}
				if err != nil {
					errs.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
					continue
				}
				ops.Add(1)
				mine = append(mine, d)
			}
			lat[w] = mine
		}(w)
	}
	wg.Wait()
	stop()
	if err := ctx.Err(); err != nil {
		return res, nil, err
	}
	// The cost is a figure of the report, not a condition of the run: a
	// meter that cannot start leaves it out.
	<-meterStarted
	if meterErr != nil {
		b.logf("%s %s: no server cost: %v", res.Client, res.Path, meterErr)
	}
	if meter != nil {
		if err := meter.addActivity(ctx); err != nil {
			b.logf("%s %s: no server cost: %v", res.Client, res.Path, err)
			meter.close()
		} else {
			t := meter.stop(ctx, int(ops.Load()+errs.Load()))
			res.cost = &t
		}
	}
	var all []time.Duration
	for _, l := range lat {
		all = append(all, l...)
	}
	res.Seconds = b.opts.Duration.Seconds()
	res.Ops, res.Errors = ops.Load(), errs.Load()
	if v := firstErr.Load(); v != nil {
		res.FirstError = v.(string)
	}
	res.PerSecond = float64(res.Ops) / res.Seconds
	if b.proxy != nil {
		res.HeldMS = float64(b.proxy.MeanHeld()) / float64(time.Millisecond)
	}
	return res, all, nil
}

// showProgress prints a progress line every second until the returned
// function is called.
func (b *runner) showProgress(r Result, start, measureFrom, end time.Time, ops *atomic.Int64) (stop func()) {
	done := make(chan struct{})
	finished := make(chan struct{})
	label := fmt.Sprintf("%s %d sources", r.Server, r.Sources)
	if r.addedRTT > 0 {
		label += " +" + r.addedRTT.String() + " rtt"
	}
	label += fmt.Sprintf(" | %-17s %-9s %2d clients", r.Client, r.Path, r.Clients)
	print := func(final bool) {
		now := time.Now()
		phase := "warmup"
		elapsed := now.Sub(start)
		if !now.Before(measureFrom) {
			phase = "measure"
			elapsed = now.Sub(measureFrom)
		}
		line := fmt.Sprintf("%s | %-7s %4.0fs/%.0fs", label, phase, elapsed.Seconds(), end.Sub(measureFrom).Seconds())
		if ops != nil && phase == "measure" && elapsed > 0 {
			line += fmt.Sprintf(" | %d ops, %.0f/s", ops.Load(), float64(ops.Load())/elapsed.Seconds())
		}
		if b.opts.ProgressTTY {
			fmt.Fprint(b.progress, "\r\033[K"+line)
			if final {
				fmt.Fprint(b.progress, "\r\033[K")
			}
		} else if !final {
			fmt.Fprintln(b.progress, line)
		}
	}
	go func() {
		defer close(finished)
		t := time.NewTicker(time.Second)
		if !b.opts.ProgressTTY {
			t.Reset(5 * time.Second)
		}
		defer t.Stop()
		for {
			select {
			case <-done:
				print(true)
				return
			case <-t.C:
				print(false)
			}
		}
	}()
	return func() { close(done); <-finished }
}

// percentiles returns p50, p95 and p99 in milliseconds (nearest rank).
func percentiles(ds []time.Duration) (p50, p95, p99 float64) {
	if len(ds) == 0 {
		return 0, 0, 0
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	at := func(q float64) float64 {
		i := int(q*float64(len(ds))+0.5) - 1
		if i < 0 {
			i = 0
		}
		if i >= len(ds) {
			i = len(ds) - 1
		}
		return float64(ds[i]) / float64(time.Millisecond)
	}
	return at(0.50), at(0.95), at(0.99)
}
