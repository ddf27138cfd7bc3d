package main

import (
	"context"

	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/goose"
	"github.com/runledger-go/runledger/internal/pgserver"
	"github.com/runledger-go/runledger/requeue"
)

// The requeue comparison (-requeue): single compare-and-requeue
// (requeue.Job) beside River's Client.JobRetry of a discarded job, the
// operation it replaces, at one client, in alternating blocks on one
// durable server; then bulk compare-and-requeue (requeue.Bulk, by list)
// of -bulk-jobs dead-lettered jobs, whose rate is compared with the single
// rate of the same run.

const requeueJobType = "runledger-bench-requeue"

// requeueReport is what -requeue prints (with -json, as JSON).
type requeueReport struct {
	Machine struct {
		CPU       string `json:"cpu"`
		Cores     int    `json:"cores"`
		GoVersion string `json:"go_version"`
		Server    string `json:"server"`
	} `json:"machine"`
	Single []requeueSingle `json:"single"`
	Bulk   requeueBulk     `json:"bulk"`
}

type requeueSingle struct {
	Operation string  `json:"operation"`
	Ops       int     `json:"ops"`
	PerSecond float64 `json:"per_second"`
	P50MS     float64 `json:"p50_ms"`
	P95MS     float64 `json:"p95_ms"`
	P99MS     float64 `json:"p99_ms"`
}

type requeueBulk struct {
	Jobs      int     `json:"jobs"`
	Chunk     int     `json:"chunk"`
	Seconds   float64 `json:"seconds"`
	PerSecond float64 `json:"per_second"`
	VsSingle  float64 `json:"vs_single"`
	// HeapStartMB and HeapMaxMB are the client's live heap (after a GC)
	// before the action and at most during it, sampled every 50 chunks;
	// both include the bench's own list of job ids (16 bytes a job).
	HeapMaxMB     float64 `json:"heap_max_mb"`
	HeapStartMB   float64 `json:"heap_start_mb"`
	ChunkP50MS    float64 `json:"chunk_p50_ms"`
	ChunkMaxMS    float64 `json:"chunk_max_ms"`
	RequeuedCount int     `json:"requeued"`
}

func runRequeueBench(ctx context.Context, dbURL string, singleOps, blocks, bulkJobs, chunk int, asJSON bool, logw io.Writer) error {
	rep := &requeueReport{}
	rep.Machine.Cores, rep.Machine.GoVersion = runtime.NumCPU(), runtime.Version()
	rep.Machine.CPU = cpuModel()
	if dbURL == "" {
		binDir, err := pgserver.FindBinDir("")
		if err != nil {
			return err
		}
		fmt.Fprintln(logw, "requeue bench: starting a throwaway durable PostgreSQL server")
		srv, err := pgserver.Start(ctx, pgserver.Options{BinDir: binDir, Durable: true,
			Settings: map[string]string{"shared_buffers": "1GB", "max_wal_size": "8GB"}})
		if err != nil {
			return err
		}
		defer srv.Stop() //nolint:errcheck
		dbURL = srv.URL("postgres")
	}
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := pool.QueryRow(ctx, `SELECT current_setting('server_version')`).Scan(&rep.Machine.Server); err != nil {
		return err
	}
	cfg, _ := pgx.ParseConfig(dbURL)
	sqlDB := stdlib.OpenDB(*cfg)
	err = goose.Up(ctx, sqlDB)
	_ = sqlDB.Close()
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	driver := riverpgxv5.New(pool)
	migrator, err := rivermigrate.New(driver, &rivermigrate.Config{Logger: quiet})
	if err != nil {
		return err
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return fmt.Errorf("rivermigrate: %w", err)
	}
	client, err := river.NewClient(driver, &river.Config{Logger: quiet})
	if err != nil {
		return err
	}

	// Seed: singleOps dead-lettered jobs for requeue.Job, singleOps
	// discarded River jobs for JobRetry, bulkJobs dead-lettered jobs for
	// requeue.Bulk.
	t0 := time.Now()
	org := uuid.MustParse("6a1f0000-0000-4000-8000-00000000b0b1")
	total := singleOps + bulkJobs
	for _, stmt := range []string{
		`INSERT INTO job_definitions (job_type) VALUES ('` + requeueJobType + `') ON CONFLICT (job_type) DO UPDATE SET is_enabled = true`,
		// Events have no foreign key to their job: they go by hand.
		`DELETE FROM job_events e USING job_queue q
		 WHERE q.organization_id = e.organization_id AND q.id = e.job_id AND q.job_type = '` + requeueJobType + `'`,
		`DELETE FROM job_queue WHERE job_type = '` + requeueJobType + `'`,
		`TRUNCATE river_job`,
	} {
		if _, err := pool.Exec(ctx, stmt); err != nil {
			return err
		}
	}
	ids := make([]uuid.UUID, total)
	for i := range ids {
		ids[i] = uuid.Must(uuid.NewV7())
	}
	for first := 0; first < total; first += 50_000 {
		part := ids[first:min(first+50_000, total)]
		if _, err := pool.Exec(ctx, `
			INSERT INTO job_queue (id, job_type, organization_id, payload, status, run_number, attempt, max_attempts, stage,
			    last_error_code, last_error_message, worker_id, started_at, finished_at, progress_done, progress_total)
			SELECT id, $2, $3, jsonb_build_object('charge', 'ch_' || ord), 'DEAD_LETTERED', 1, 3, 3, 'running',
			    'provider.down', 'payment provider unavailable', 'bench-worker', now() - interval '2 minutes',
			    now() - interval '1 minute' + make_interval(secs => ord / 1e6), 2, 5
			FROM unnest($1::uuid[]) WITH ORDINALITY AS u(id, ord)`, part, requeueJobType, org); err != nil {
			return fmt.Errorf("seed: %w", err)
		}
		if _, err := pool.Exec(ctx, `
			INSERT INTO job_events (organization_id, job_id, run_number, attempt, event_type, payload)
			SELECT $2, id, 1, 3, 'DEAD_LETTERED', '{"failure_kind":"RETRYABLE"}' FROM unnest($1::uuid[]) AS u(id)`, part, org); err != nil {
			return fmt.Errorf("seed events: %w", err)
		}
	}
	var riverIDs []int64
	for first := 1; first <= singleOps; first += 1000 {
		var params []river.InsertManyParams
		for n := first; n < first+1000 && n <= singleOps; n++ {
			params = append(params, river.InsertManyParams{Args: argsFor(int64(n))})
		}
		res, err := client.InsertMany(ctx, params)
		if err != nil {
			return err
		}
		for _, r := range res {
			riverIDs = append(riverIDs, r.Job.ID)
		}
	}
	if _, err := pool.Exec(ctx, `UPDATE river_job SET state = 'discarded', attempt = max_attempts, attempted_at = now(), finalized_at = now(),
		errors = ARRAY['{"at":"2026-01-01T00:00:00Z","attempt":1,"error":"provider down"}'::jsonb]`); err != nil {
		return fmt.Errorf("discard river jobs: %w", err)
	}
	for _, stmt := range []string{"VACUUM ANALYZE", "CHECKPOINT"} {
		if _, err := pool.Exec(ctx, stmt); err != nil {
			return err
		}
	}
	fmt.Fprintf(logw, "requeue bench: seeded %d dead-lettered jobs and %d discarded River jobs in %s\n", total, singleOps, time.Since(t0).Round(time.Millisecond))

	// Single, one client, in alternating blocks (the order rotates).
	one, err := pgxpool.New(ctx, dbURL+sep(dbURL)+"pool_max_conns=1&pool_min_conns=1")
	if err != nil {
		return err
	}
	defer one.Close()
	oneClient, err := river.NewClient(riverpgxv5.New(one), &river.Config{Logger: quiet})
	if err != nil {
		return err
	}
	scope := runledger.Organization(org)
	perBlock := max(1, singleOps/blocks)
	var latR, latJ []time.Duration
	next := 0
	doRequeue := func(i int) error {
		t := time.Now()
		out, err := requeue.Job(ctx, one, requeue.Request{Scope: scope, JobID: ids[i], ExpectedStatus: requeue.DeadLettered,
			ExpectedRunNumber: 1, Reason: "provider back"})
		d := time.Since(t)
		if r, ok := out.(requeue.Requeued); err != nil || !ok || r.Disposition != runledger.DispositionInserted {
			return fmt.Errorf("requeue: %T %v", out, err)
		}
		latR = append(latR, d)
		return nil
	}
	doRetry := func(i int) error {
		t := time.Now()
		job, err := oneClient.JobRetry(ctx, riverIDs[i])
		d := time.Since(t)
		if err != nil || job.State != "available" {
			return fmt.Errorf("JobRetry: %v", err)
		}
		latJ = append(latJ, d)
		return nil
	}
	// Warm both (statement caches), unmeasured.
	for i := 0; i < 20 && i < singleOps; i++ {
		_ = doRequeue(i)
		_ = doRetry(i)
	}
	latR, latJ = latR[:0], latJ[:0]
	next = 20
	for b := 0; next < singleOps; b++ {
		end := min(next+perBlock, singleOps)
		order := []func(int) error{doRequeue, doRetry}
		if b%2 == 1 {
			slices.Reverse(order)
		}
		for _, do := range order {
			for i := next; i < end; i++ {
				if err := do(i); err != nil {
					return err
				}
			}
		}
		next = end
	}
	rep.Single = []requeueSingle{single("requeue.Job", latR), single("river JobRetry", latJ)}

	// Bulk, by list, over the jobs not used above.
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	start := float64(ms.HeapAlloc) / (1 << 20)
	heapMax := start
	list := func(yield func(requeue.Source, error) bool) {
		for _, id := range ids[singleOps:] {
			if !yield(requeue.Source{JobID: id, ExpectedStatus: requeue.DeadLettered, ExpectedRunNumber: 1}, nil) {
				return
			}
		}
	}
	var chunkLat []time.Duration
	last := time.Now()
	t1 := time.Now()
	bp, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		return err
	}
	defer bp.Close()
	sum, err := requeue.Bulk(ctx, bp, requeue.BulkRequest{Scope: scope, Reason: "provider back", Stream: list, ChunkSize: chunk},
		func(c requeue.BulkChunk) error {
			now := time.Now()
			chunkLat = append(chunkLat, now.Sub(last))
			last = now
			if c.Index%50 == 0 {
				// The live heap: collected first, so that garbage not yet
				// collected does not count.
				runtime.GC()
				runtime.ReadMemStats(&ms)
				heapMax = max(heapMax, float64(ms.HeapAlloc)/(1<<20))
				fmt.Fprintf(logw, "\rrequeue bench: bulk %d/%d", c.Total.Selected, bulkJobs)
			}
			return nil
		})
	fmt.Fprintln(logw)
	if err != nil {
		return err
	}
	secs := time.Since(t1).Seconds()
	slices.Sort(chunkLat)
	rep.Bulk = requeueBulk{Jobs: bulkJobs, Chunk: chunk, Seconds: secs, PerSecond: float64(sum.Requeued) / secs,
		HeapStartMB: start, HeapMaxMB: heapMax, RequeuedCount: sum.Requeued}
	if len(chunkLat) > 0 {
		rep.Bulk.ChunkP50MS = ms2(chunkLat[len(chunkLat)/2])
		rep.Bulk.ChunkMaxMS = ms2(chunkLat[len(chunkLat)-1])
	}
	if rep.Single[0].PerSecond > 0 {
		rep.Bulk.VsSingle = rep.Bulk.PerSecond / rep.Single[0].PerSecond
	}
	if sum.Requeued != bulkJobs {
		return fmt.Errorf("bulk requeued %d of %d", sum.Requeued, bulkJobs)
	}
	if asJSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	fmt.Printf("requeue bench: PostgreSQL %s (durable), %s, %d cores, %s\n", rep.Machine.Server, rep.Machine.CPU, rep.Machine.Cores, rep.Machine.GoVersion)
	fmt.Printf("\nsingle, 1 client, %d ops each in alternating blocks of %d\n", len(latR), perBlock)
	fmt.Printf("  %-16s %10s %9s %9s %9s\n", "operation", "ops/s", "p50 ms", "p95 ms", "p99 ms")
	for _, s := range rep.Single {
		fmt.Printf("  %-16s %10.0f %9.3f %9.3f %9.3f\n", s.Operation, s.PerSecond, s.P50MS, s.P95MS, s.P99MS)
	}
	fmt.Printf("  p50 ratio requeue.Job / JobRetry: %.2f\n", rep.Single[0].P50MS/rep.Single[1].P50MS)
	b := rep.Bulk
	fmt.Printf("\nbulk, by list, %d jobs in chunks of %d: %.1f s, %.0f jobs/s (%.1fx the single rate); chunk p50 %.1f ms, max %.1f ms; live heap %.1f MB at start (the bench's id list included), at most %.1f MB\n",
		b.Jobs, b.Chunk, b.Seconds, b.PerSecond, b.VsSingle, b.ChunkP50MS, b.ChunkMaxMS, b.HeapStartMB, b.HeapMaxMB)
	return nil
}

func single(op string, lat []time.Duration) requeueSingle {
	s := slices.Clone(lat)
	slices.Sort(s)
	var sum time.Duration
	for _, d := range s {
		sum += d
	}
	r := requeueSingle{Operation: op, Ops: len(s)}
	if len(s) == 0 {
		return r
	}
	r.PerSecond = float64(len(s)) / sum.Seconds()
	r.P50MS, r.P95MS, r.P99MS = ms2(s[len(s)*50/100]), ms2(s[len(s)*95/100]), ms2(s[len(s)*99/100])
	return r
}

func ms2(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func sep(url string) string {
	for _, c := range url {
		if c == '?' {
			return "&"
		}
	}
	return "?"
}

func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return runtime.GOARCH
	}
	for _, line := range splitLines(string(b)) {
		if len(line) > 10 && line[:10] == "model name" {
			for i := range line {
				if line[i] == ':' {
					return line[i+2:]
				}
			}
		}
	}
	return runtime.GOARCH
}

func splitLines(s string) []string {
	var out []string
	start := 0
	for i := range s {
		if s[i] == '\n' {
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	return out
}
