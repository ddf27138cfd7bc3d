package hotpath_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/internal/testdb"
	"github.com/runledger-go/runledger/jobs"
	"github.com/runledger-go/runledger/lease"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// hotJobs is how many jobs each phase moves, in batches of hotBatch.
const (
	hotJobs  = 20_000
	hotBatch = 1_000
)

// phaseCost is what one phase cost the backend that ran it.
type phaseCost struct {
	cpu        time.Duration
	wal        int64
	records    map[string]int64 // pg_waldump --stats=record: "Btree/INSERT_LEAF" -> count
	jobs       int
	name       string
	startLSN   string
	endLSN     string
	waldumpErr error
}

// TestHotPathCost enqueues 20,000 jobs with EnqueueMany (batches of 1,000),
// claims them (Claim, 1,000 a call) and completes them (CompleteMany, 1,000
// a call) on one connection, and logs per job and per phase the serving
// backend's CPU time (/proc/PID/schedstat), the WAL written (the insert LSN
// before and after) and, from pg_waldump --stats=record over the phase, the
// index entries (B-tree leaf and posting-list inserts) and the heap updates
// that were HOT. Run only when RUNLEDGER_HOTPATH is set, against a server on
// this machine (its /proc and its pg_waldump are read).
func TestHotPathCost(t *testing.T) {
	if os.Getenv("RUNLEDGER_HOTPATH") == "" {
		t.Skip("a measurement, not a test: set RUNLEDGER_HOTPATH=1 to run it")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	base := testdb.New(t)
	cfg := base.Config().Copy()
	cfg.MaxConns, cfg.MinConns = 1, 1
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	testdb.DefineType(t, pool, "hot")

	var pid int
	var dataDir string
	if err := pool.QueryRow(ctx, `SELECT pg_backend_pid(), current_setting('data_directory')`).Scan(&pid, &dataDir); err != nil {
		t.Fatal(err)
	}
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	if err != nil {
		t.Fatalf("the server's backend is not readable here (%v): run against a local server", err)
	}
	waldump := filepath.Join(filepath.Dir(exe), "pg_waldump")
	if _, err := pool.Exec(ctx, `VACUUM ANALYZE`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `CHECKPOINT`); err != nil {
		t.Fatal(err)
	}

	measure := func(name string, fn func() int) phaseCost {
		t.Helper()
		var lsn0, lsn1 string
		if err := pool.QueryRow(ctx, `SELECT pg_current_wal_insert_lsn()::text`).Scan(&lsn0); err != nil {
			t.Fatal(err)
		}
		cpu0 := schedstat(t, pid)
		n := fn()
		cpu1 := schedstat(t, pid)
		var wal int64
		if err := pool.QueryRow(ctx, `SELECT pg_current_wal_insert_lsn()::text, pg_wal_lsn_diff(pg_current_wal_insert_lsn(), $1::pg_lsn)::bigint`, lsn0).Scan(&lsn1, &wal); err != nil {
			t.Fatal(err)
		}
		// The phase's last records must be on disk for pg_waldump.
		if _, err := pool.Exec(ctx, `SELECT pg_switch_wal()`); err != nil {
			t.Fatal(err)
		}
		pc := phaseCost{name: name, jobs: n, cpu: cpu1 - cpu0, wal: wal, startLSN: lsn0, endLSN: lsn1}
		pc.records, pc.waldumpErr = walStats(waldump, filepath.Join(dataDir, "pg_wal"), lsn0, lsn1)
		return pc
	}

	scope := runledger.Global()
	enq := measure("enqueue", func() int {
		for i := 0; i < hotJobs; i += hotBatch {
			reqs := make([]jobs.EnqueueRequest, hotBatch)
			for j := range reqs {
				reqs[j] = jobs.EnqueueRequest{Scope: scope, JobType: "hot", Payload: []byte(`{"n":1}`)}
			}
			if _, err := jobs.EnqueueMany(ctx, pool, reqs); err != nil {
				t.Fatal(err)
			}
		}
		return hotJobs
	})
	if _, err := pool.Exec(ctx, `ANALYZE`); err != nil {
		t.Fatal(err)
	}
	var leased []runledger.Job
	claim := measure("claim", func() int {
		for len(leased) < hotJobs {
			got, err := lease.Claim(ctx, pool, lease.ClaimRequest{WorkerID: "hot", Limit: hotBatch, Lease: 10 * time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			if len(got) == 0 {
				t.Fatalf("claimed %d of %d jobs, then none", len(leased), hotJobs)
			}
			leased = append(leased, got...)
		}
		return len(leased)
	})
	complete := measure("complete", func() int {
		for i := 0; i < len(leased); i += hotBatch {
			reqs := make([]lease.CompleteRequest, 0, hotBatch)
			for _, j := range leased[i:min(i+hotBatch, len(leased))] {
				reqs = append(reqs, testdb.CompleteRequest(j))
			}
			res, err := lease.CompleteMany(ctx, pool, reqs)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range res {
				if r.Err != nil {
					t.Fatal(r.Err)
				}
			}
		}
		return len(leased)
	})

	var total phaseCost
	total.records = map[string]int64{}
	for _, p := range []phaseCost{enq, claim, complete} {
		if p.waldumpErr != nil {
			t.Logf("%s: pg_waldump: %v", p.name, p.waldumpErr)
		}
		t.Logf("%-8s %7.1f us/job CPU  %6d WAL bytes/job  %5.2f index entries/job  HOT %d of %d updates",
			p.name, perJob(float64(p.cpu.Microseconds()), p.jobs), int64(perJob(float64(p.wal), p.jobs)),
			perJob(float64(indexEntries(p.records)), p.jobs), p.records["Heap/HOT_UPDATE"],
			p.records["Heap/HOT_UPDATE"]+p.records["Heap/UPDATE"])
		total.cpu += p.cpu
		total.wal += p.wal
		for k, v := range p.records {
			total.records[k] += v
		}
	}
	t.Logf("%-8s %7.1f us/job CPU  %6d WAL bytes/job  %5.2f index entries/job", "total",
		perJob(float64(total.cpu.Microseconds()), hotJobs), int64(perJob(float64(total.wal), hotJobs)),
		perJob(float64(indexEntries(total.records)), hotJobs))
}

func perJob(v float64, jobs int) float64 { return v / float64(jobs) }

// indexEntries counts the B-tree entries written: leaf inserts, and
// inserts into a deduplicated posting list.
func indexEntries(records map[string]int64) int64 {
	return records["Btree/INSERT_LEAF"] + records["Btree/INSERT_POST"]
}

// schedstat returns the CPU time backend pid has run, from the first field
// of /proc/PID/schedstat (nanoseconds on the CPU).
func schedstat(t *testing.T, pid int) time.Duration {
	t.Helper()
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/schedstat", pid))
	if err != nil {
		t.Fatal(err)
	}
	ns, err := strconv.ParseInt(strings.Fields(string(raw))[0], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return time.Duration(ns)
}

// walStats runs pg_waldump --stats=record over [start, end) and returns
// the record count of each resource manager/record type.
func walStats(waldump, walDir, start, end string) (map[string]int64, error) {
	out, err := exec.Command(waldump, "--path", walDir, "--start", start, "--end", end, "--stats=record").Output()
	if err != nil {
		return nil, err
	}
	records := map[string]int64{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 || !strings.Contains(f[0], "/") {
			continue
		}
		// "Heap/HOT_UPDATE   123 ( 1.00) ...": the name may carry a
		// suffix such as "+INIT" in its own column on older versions.
		name, count := f[0], f[1]
		if len(f) > 2 && strings.HasPrefix(f[1], "+") {
			name, count = f[0]+f[1], f[2]
		}
		n, err := strconv.ParseInt(count, 10, 64)
		if err != nil {
			continue
		}
		records[name] += n
	}
	return records, sc.Err()
}
