package bench

import (
	"context"
	"fmt"
	"io"
	"slices"
	"time"
)

// Anchor is a client the bench runs beside the Go client for comparison:
// another system's calls doing comparable work, on the same databases, in
// the same rotation, with the same clients, warmup and duration. An
// anchor that brings dependencies of its own lives in a module of its own
// that calls Run with it, so that they never reach this module (the River
// comparison is such a nested module).
type Anchor interface {
	// Name labels the anchor's results (Result.Client); it must differ
	// from the bench's own clients.
	Name() string
	// Prepare readies a database the bench has just seeded with sources
	// sources: the anchor's schema and data. It runs once per database,
	// before any run on it.
	Prepare(ctx context.Context, dbURL string, sources int) error
	// Open readies the anchor's counterpart of path for clients
	// concurrent clients on dbURL, connections opened; nil and no error
	// when it has none (the path is then not run for the anchor).
	Open(ctx context.Context, dbURL string, path Path, clients int) (AnchorRun, error)
}

// AnchorRun is an anchor's operation, ready to run.
type AnchorRun interface {
	// Operation names the operation (Result.Operation).
	Operation() string
	// Do runs one operation on seeded source n (1 <= n <= the seed
	// size); key is unique within the run. Clients goroutines call it at
	// once. An error counts the operation as failed.
	Do(ctx context.Context, n int64, key string) error
	// RoundTrips is the operation's round trips, 0 when not known.
	RoundTrips() int
	// Close releases what Open took.
	Close()
}

func (b *runner) prepareAnchors(ctx context.Context, dbURL string, sources int) error {
	for _, a := range b.opts.Anchors {
		t0 := time.Now()
		if err := a.Prepare(ctx, dbURL, sources); err != nil {
			return fmt.Errorf("bench: prepare %s: %w", a.Name(), err)
		}
		b.logf("prepared %s for %d sources in %s", a.Name(), sources, time.Since(t0).Round(time.Millisecond))
	}
	return nil
}

// runAnchor runs a's counterpart of base.Path as runGo runs the replay;
// ran is false when a has none.
func (b *runner) runAnchor(ctx context.Context, a Anchor, url string, base Result) (res Result, lat []time.Duration, ran bool, err error) {
	res = base
	res.Client = a.Name()
	run, err := a.Open(ctx, url, base.Path, base.Clients)
	if err != nil {
		return res, nil, false, fmt.Errorf("bench: %s: %w", a.Name(), err)
	}
	if run == nil {
		return res, nil, false, nil
	}
	defer run.Close()
	res.Operation = run.Operation()
	res.RoundTrips = run.RoundTrips()
	// The same context as the Go client's calls (see runGo).
	callCtx := context.WithoutCancel(ctx)
	if b.opts.CancelableContext {
		callCtx = ctx
	}
	res, lat, err = b.drive(ctx, url, res, a.Name()+"-", func(n int64, key string) error {
		return run.Do(callCtx, n, key)
	})
	return res, lat, true, err
}

// anchorRatios writes, for each anchor run of group k, the Go client's
// figures on the same path and clients divided by the anchor's.
func (r *Report) anchorRatios(w io.Writer, k groupKey) {
	var lines []string
	for _, res := range r.Results {
		if !k.match(res) || !slices.Contains(r.Settings.Anchors, res.Client) {
			continue
		}
		goRes, ok := r.find(k, res.Path, ClientGo, res.Clients)
		if !ok || res.PerSecond == 0 || res.P50 == 0 || res.P95 == 0 {
			continue
		}
		cpu, wal := "-", "-"
		if goRes.Cost != nil && res.Cost != nil {
			cpu, wal = costRatio(goRes.Cost.CPUPerJobUS, res.Cost.CPUPerJobUS), costRatio(goRes.Cost.WALBytesPerJob, res.Cost.WALBytesPerJob)
		}
		lines = append(lines, fmt.Sprintf("%s\t%s %s\t%d\t%.2fx\t%.2fx\t%.2fx\t%s\t%s\t",
			res.Path, res.Client, res.Operation, res.Clients,
			goRes.PerSecond/res.PerSecond, goRes.P50/res.P50, goRes.P95/res.P95, cpu, wal))
	}
	printTable(w, "\n  replay (Go) / anchor, same run (throughput ratio: above 1 means replay is faster; p50, p95 and the server's CPU and WAL per operation: below 1 means replay is faster or cheaper)\n",
		"path\tanchor\tclients\tops/s ratio\tp50 ratio\tp95 ratio\tCPU/op ratio\tWAL/op ratio\t", lines)
}

// costRatio is mine/theirs, or "-" when either was not measured or
// theirs is 0.
func costRatio(mine, theirs *float64) string {
	if mine == nil || theirs == nil || *theirs == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2fx", *mine / *theirs)
}
