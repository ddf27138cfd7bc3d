package bench

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runledger-go/runledger/internal/pgserver"
)

// ServerCost is what a run cost the server per job, measured as
// docs/PERFORMANCE.md's method says: the CPU time of every backend of the
// run's connections (/proc/PID/schedstat of each pg_backend_pid, from its
// connection to the end of the run, or to its close when earlier), the WAL
// between the insert LSN before and after (pg_current_wal_insert_lsn), and
// the index entries and heap updates of that WAL range (pg_waldump
// --stats=record). A figure that cannot be measured (a server on another
// machine, no pg_waldump, no right to read the data directory) is nil and
// Unavailable says why.
type ServerCost struct {
	Jobs int `json:"jobs"`
	// CPUPerJobUS is backend CPU in microseconds per job, summed over
	// Backends backends.
	CPUPerJobUS *float64 `json:"cpu_us_per_job"`
	Backends    int      `json:"backends,omitempty"`
	// WALBytesPerJob is the WAL written per job.
	WALBytesPerJob *float64 `json:"wal_bytes_per_job"`
	// IndexEntriesPerJob counts the WAL records that insert an index
	// entry (btree leaf and posting-list inserts and splits, hash, GIN,
	// GiST and SP-GiST inserts) per job.
	IndexEntriesPerJob *float64 `json:"index_entries_per_job"`
	// HeapUpdatesPerJob counts heap updates (HOT or not) per job,
	// HOTUpdatesPerJob the HOT ones.
	HeapUpdatesPerJob *float64 `json:"heap_updates_per_job"`
	HOTUpdatesPerJob  *float64 `json:"hot_updates_per_job"`
	Unavailable       []string `json:"unavailable,omitempty"`
	// Insert and Work split the figures by phase: the insert of the
	// jobs, then the worker's claims and completions (each with nil
	// Insert and Work).
	Insert *ServerCost `json:"insert,omitempty"`
	Work   *ServerCost `json:"work,omitempty"`
}

// costTotals are a run's raw figures; totals of several runs add up.
type costTotals struct {
	jobs                   int
	cpuNS                  int64
	backends               int
	walBytes               int64
	indexEntries           int64
	heapUpdates, hotUpdate int64
	cpuOK, walOK, dumpOK   bool
	notes                  []string
	// insert and work are the phases of a run's totals (nil in a phase's
	// own totals).
	insert, work *costTotals
}

// then is the totals of a run of two phases over the same jobs: t, then
// next.
func (t costTotals) then(next costTotals) costTotals {
	sum := t
	sum.add(next)
	sum.jobs = t.jobs
	ins, work := t, next
	sum.insert, sum.work = &ins, &work
	return sum
}

func (t *costTotals) add(o costTotals) {
	first := t.jobs == 0
	for _, p := range []struct{ mine, theirs **costTotals }{{&t.insert, &o.insert}, {&t.work, &o.work}} {
		if *p.theirs == nil {
			continue
		}
		if *p.mine == nil {
			*p.mine = &costTotals{}
		}
		(*p.mine).add(**p.theirs)
	}
	t.jobs += o.jobs
	t.cpuNS += o.cpuNS
	t.backends += o.backends
	t.walBytes += o.walBytes
	t.indexEntries += o.indexEntries
	t.heapUpdates += o.heapUpdates
	t.hotUpdate += o.hotUpdate
	if first {
		t.cpuOK, t.walOK, t.dumpOK = o.cpuOK, o.walOK, o.dumpOK
	} else {
		t.cpuOK, t.walOK, t.dumpOK = t.cpuOK && o.cpuOK, t.walOK && o.walOK, t.dumpOK && o.dumpOK
	}
	for _, n := range o.notes {
		if !contains(t.notes, n) {
			t.notes = append(t.notes, n)
		}
	}
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// perJob turns the totals into figures per job.
func (t costTotals) perJob() *ServerCost {
	if t.jobs == 0 {
		return nil
	}
	per := func(ok bool, v float64) *float64 {
		if !ok {
			return nil
		}
		f := v / float64(t.jobs)
		return &f
	}
	var insert, work *ServerCost
	if t.insert != nil && t.work != nil {
		insert, work = t.insert.perJob(), t.work.perJob()
	}
	return &ServerCost{
		Insert:             insert,
		Work:               work,
		Jobs:               t.jobs,
		CPUPerJobUS:        per(t.cpuOK, float64(t.cpuNS)/1e3),
		Backends:           t.backends,
		WALBytesPerJob:     per(t.walOK, float64(t.walBytes)),
		IndexEntriesPerJob: per(t.dumpOK, float64(t.indexEntries)),
		HeapUpdatesPerJob:  per(t.dumpOK, float64(t.heapUpdates)),
		HOTUpdatesPerJob:   per(t.dumpOK, float64(t.hotUpdate)),
		Unavailable:        t.notes,
	}
}

// costMeter measures one run. Every pool of the run is configured with
// hook, so that each backend's CPU is read when its connection opens and
// again when it closes or the run ends, whichever comes first.
type costMeter struct {
	ctl      *pgx.Conn
	startLSN string

	mu       sync.Mutex
	stopped  bool
	live     map[uint32]int64 // backend pid: its CPU (ns) when connected
	cpuNS    int64
	backends int
	cpuErr   error
}

// startCost opens the meter's own connection (its statements are not
// counted) and reads the WAL insert position.
func startCost(ctx context.Context, url string) (*costMeter, error) {
	ctl, err := pgx.Connect(ctx, url)
	if err != nil {
		return nil, err
	}
	m := &costMeter{ctl: ctl, live: map[uint32]int64{}}
	if err := ctl.QueryRow(ctx, `SELECT pg_current_wal_insert_lsn()::text`).Scan(&m.startLSN); err != nil {
		_ = ctl.Close(context.Background())
		return nil, err
	}
	return m, nil
}

// hook makes cfg's connections report their backends to the meter.
func (m *costMeter) hook(cfg *pgxpool.Config) {
	after, before := cfg.AfterConnect, cfg.BeforeClose
	cfg.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
		if after != nil {
			if err := after(ctx, c); err != nil {
				return err
			}
		}
		m.connected(c.PgConn().PID())
		return nil
	}
	cfg.BeforeClose = func(c *pgx.Conn) {
		m.closed(c.PgConn().PID())
		if before != nil {
			before(c)
		}
	}
}

func (m *costMeter) connected(pid uint32) {
	ns, err := backendCPU(pid)
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.stopped {
		return
	}
	if err != nil {
		m.cpuErr = cmpOr(m.cpuErr, err)
		return
	}
	m.live[pid] = ns
	m.backends++
}

func (m *costMeter) closed(pid uint32) {
	ns, err := backendCPU(pid)
	m.mu.Lock()
	defer m.mu.Unlock()
	at, ok := m.live[pid]
	if m.stopped || !ok {
		return
	}
	delete(m.live, pid)
	if err != nil {
		m.cpuErr = cmpOr(m.cpuErr, err)
		return
	}
	m.cpuNS += ns - at
}

// stop ends the run: it reads every backend still connected and the WAL
// insert position, then decodes the WAL range with pg_waldump.
func (m *costMeter) stop(ctx context.Context, jobs int) costTotals {
	defer m.ctl.Close(context.Background())
	t := costTotals{jobs: jobs}
	m.mu.Lock()
	m.stopped = true
	for pid, at := range m.live {
		ns, err := backendCPU(pid)
		if err != nil {
			m.cpuErr = cmpOr(m.cpuErr, err)
			continue
		}
		m.cpuNS += ns - at
	}
	t.cpuNS, t.backends = m.cpuNS, m.backends
	t.cpuOK = m.cpuErr == nil && m.backends > 0
	if !t.cpuOK {
		t.notes = append(t.notes, fmt.Sprintf("server CPU: %v", cmpOr(m.cpuErr, errors.New("no backend seen"))))
	}
	m.mu.Unlock()

	var endLSN string
	var wal int64
	err := m.ctl.QueryRow(ctx, `SELECT pg_current_wal_insert_lsn()::text, pg_wal_lsn_diff(pg_current_wal_insert_lsn(), $1::pg_lsn)::bigint`, m.startLSN).Scan(&endLSN, &wal)
	if err != nil {
		t.notes = append(t.notes, fmt.Sprintf("WAL: %v", err))
		return t
	}
	t.walBytes, t.walOK = wal, true
	if err := m.waldump(ctx, endLSN, &t); err != nil {
		t.notes = append(t.notes, fmt.Sprintf("index entries and HOT updates: %v", err))
	} else {
		t.dumpOK = true
	}
	return t
}

// waldump reads the WAL of the run with pg_waldump --stats=record, from
// the server's own bin directory (the one its backend runs from).
func (m *costMeter) waldump(ctx context.Context, endLSN string, t *costTotals) error {
	// The range must be written out before pg_waldump reads it: a
	// transaction that wrote WAL (here the catalog rows of a temporary
	// table) commits synchronously, which flushes the WAL up to its commit
	// record, past endLSN. (One that only took an xid would not flush.)
	if _, err := m.ctl.Exec(ctx, `SET synchronous_commit = on`); err != nil {
		return err
	}
	if _, err := m.ctl.Exec(ctx, `BEGIN; CREATE TEMPORARY TABLE runledger_bench_flush () ON COMMIT DROP; COMMIT`); err != nil {
		return fmt.Errorf("flushing the WAL: %w", err)
	}
	var dataDir string
	if err := m.ctl.QueryRow(ctx, `SHOW data_directory`).Scan(&dataDir); err != nil {
		return fmt.Errorf("the data directory: %w", err)
	}
	bin, err := findWaldump(m.ctl.PgConn().PID())
	if err != nil {
		return err
	}
	out, err := exec.CommandContext(ctx, bin, "--stats=record", "-p", filepath.Join(dataDir, "pg_wal"),
		"-s", m.startLSN, "-e", endLSN).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %w: %s", bin, err, lastLine(out))
	}
	counts := parseWaldumpStats(out)
	for _, k := range indexInsertRecords {
		t.indexEntries += counts[k]
	}
	t.heapUpdates = counts["Heap/UPDATE"] + counts["Heap/HOT_UPDATE"]
	t.hotUpdate = counts["Heap/HOT_UPDATE"]
	return nil
}

// indexInsertRecords are the WAL record types that each add one index
// entry (a split carries the entry whose insert caused it; a GIN
// pending-list insert carries all the keys of one heap row).
var indexInsertRecords = []string{
	"Btree/INSERT_LEAF", "Btree/INSERT_POST", "Btree/SPLIT_L", "Btree/SPLIT_R",
	"Hash/INSERT", "Gin/INSERT", "Gin/INSERT_LISTPAGE", "Gist/PAGE_UPDATE", "SPGist/ADD_LEAF",
}

// parseWaldumpStats reads the record counts of pg_waldump --stats=record:
// lines of "Type N (%) ...".
func parseWaldumpStats(out []byte) map[string]int64 {
	counts := map[string]int64{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 || !strings.Contains(f[0], "/") {
			continue
		}
		if n, err := strconv.ParseInt(f[1], 10, 64); err == nil {
			counts[f[0]] += n
		}
	}
	return counts
}

func lastLine(b []byte) string {
	s := strings.TrimSpace(string(b))
	return s[strings.LastIndex(s, "\n")+1:]
}

// findWaldump finds pg_waldump beside the server's postgres binary (read
// from the backend's /proc entry), else in the bin directory the
// throwaway servers come from, else on PATH.
func findWaldump(backend uint32) (string, error) {
	var tried []string
	if exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", backend)); err == nil {
		p := filepath.Join(filepath.Dir(exe), "pg_waldump")
		if isExecutable(p) {
			return p, nil
		}
		tried = append(tried, p)
	}
	if dir, err := pgserver.FindBinDir(""); err == nil {
		p := filepath.Join(dir, "pg_waldump")
		if isExecutable(p) {
			return p, nil
		}
		tried = append(tried, p)
	}
	if p, err := exec.LookPath("pg_waldump"); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("no pg_waldump (tried %s and PATH)", strings.Join(tried, ", "))
}

func isExecutable(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir() && st.Mode()&0o111 != 0
}

// backendCPU is the CPU time in nanoseconds a local backend has run
// (the first field of /proc/PID/schedstat). It refuses a process that is
// not a PostgreSQL server, so a remote server's pid never reads a local
// process by chance.
func backendCPU(pid uint32) (int64, error) {
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	if err != nil {
		return 0, fmt.Errorf("backend %d is not a process of this machine that the bench may read (%v)", pid, err)
	}
	if base := filepath.Base(exe); base != "postgres" && base != "postmaster" {
		return 0, fmt.Errorf("backend %d is not a local PostgreSQL server process (%s)", pid, exe)
	}
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/schedstat", pid))
	if err != nil {
		return 0, err
	}
	f := strings.Fields(string(data))
	if len(f) == 0 {
		return 0, fmt.Errorf("/proc/%d/schedstat: empty", pid)
	}
	return strconv.ParseInt(f[0], 10, 64)
}

// close closes the meter's connection (stop does too).
func (m *costMeter) close() { _ = m.ctl.Close(context.Background()) }

// summary is the figures in one line.
func (c *ServerCost) summary() string {
	return fmt.Sprintf("CPU %s us, WAL %s B, %s index entries, %s heap updates (%s HOT)",
		fmtCost(c.CPUPerJobUS, 1), fmtCost(c.WALBytesPerJob, 0), fmtCost(c.IndexEntriesPerJob, 1),
		fmtCost(c.HeapUpdatesPerJob, 1), fmtCost(c.HOTUpdatesPerJob, 1))
}

// fmtCost prints a figure, or "n/a" when it was not measured.
func fmtCost(v *float64, decimals int) string {
	if v == nil {
		return "n/a"
	}
	return strconv.FormatFloat(*v, 'f', decimals, 64)
}

// startActivityCost starts a meter on the client backends of url's
// database that are connected now (pg_stat_activity), for runs whose
// connections are open before the measured time starts.
func startActivityCost(ctx context.Context, url string) (*costMeter, error) {
	m, err := startCost(ctx, url)
	if err != nil {
		return nil, err
	}
	pids, err := m.activity(ctx)
	if err != nil {
		m.close()
		return nil, err
	}
	for _, pid := range pids {
		m.connected(pid)
	}
	return m, nil
}

// addActivity adds the client backends of the database that connected
// since the meter started, with all their CPU.
func (m *costMeter) addActivity(ctx context.Context) error {
	pids, err := m.activity(ctx)
	if err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, pid := range pids {
		if _, ok := m.live[pid]; !ok {
			m.live[pid] = 0
			m.backends++
		}
	}
	return nil
}

// activity lists the client backends of the meter's database but its own.
func (m *costMeter) activity(ctx context.Context) ([]uint32, error) {
	rows, err := m.ctl.Query(ctx, `SELECT pid FROM pg_stat_activity
WHERE datname = current_database() AND pid <> pg_backend_pid() AND backend_type = 'client backend'`)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (uint32, error) {
		var pid int32
		err := r.Scan(&pid)
		return uint32(pid), err
	})
}
