package bench

import (
	"bufio"
	"bytes"
	"context"
	"embed"
	"fmt"
	mrand "math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/runledger-go/runledger/internal/pgserver"
)

// pgbenchScripts holds the pgbench scripts run beside the Go replay: for
// each path a reference_*.sql script (the reference protocol, one statement
// per round trip) and a pipelined_*.sql script (this project's statements
// in its round trips), generated from db/ by TestPgbenchScripts -update.
// Each expects the variables sources, org, reason and seed (pgbench -D) and
// the helper functions the bench seeding creates; run them with -M prepared.
//
//go:embed scripts/*.sql
var pgbenchScripts embed.FS

func newRand() *mrand.Rand {
	return mrand.New(mrand.NewPCG(mrand.Uint64(), mrand.Uint64()))
}

// findPgbench returns the pgbench binary to use and its version: override
// if set, else the one next to the server binaries (binDir, or where
// package pgserver finds them), else the one on PATH.
func findPgbench(override, binDir string) (string, string, error) {
	var candidates []string
	if override != "" {
		candidates = []string{override}
	} else {
		if binDir == "" {
			binDir, _ = pgserver.FindBinDir("")
		}
		if binDir != "" {
			candidates = append(candidates, filepath.Join(binDir, "pgbench"))
		}
		if p, err := exec.LookPath("pgbench"); err == nil {
			candidates = append(candidates, p)
		}
	}
	for _, c := range candidates {
		out, err := exec.Command(c, "--version").Output()
		if err == nil {
			return c, strings.TrimSpace(string(out)), nil
		}
	}
	return "", "", fmt.Errorf("bench: --compare-pgbench needs pgbench (it comes with the PostgreSQL server or client package, or pass --pgbench PATH); tried %v", candidates)
}

// writeScripts writes the pgbench scripts into a new temp directory.
func writeScripts() (string, error) {
	dir, err := os.MkdirTemp("", "runledger-bench-")
	if err != nil {
		return "", err
	}
	entries, err := pgbenchScripts.ReadDir("scripts")
	if err != nil {
		return "", err
	}
	for _, e := range entries {
		data, err := pgbenchScripts.ReadFile("scripts/" + e.Name())
		if err != nil {
			return "", err
		}
		if err := os.WriteFile(filepath.Join(dir, e.Name()), data, 0o644); err != nil {
			return "", err
		}
	}
	return dir, nil
}

var (
	reProcessed = regexp.MustCompile(`number of transactions actually processed: (\d+)`)
	reFailed    = regexp.MustCompile(`number of failed transactions: (\d+)`)
	reTPS       = regexp.MustCompile(`tps = ([0-9.]+) \(without initial connection time\)`)
)

// runPgbench runs the pgbench script of style for base's path: a warmup
// run, then the measured one with a per-transaction log for the
// latencies.
func (b *runner) runPgbench(ctx context.Context, url string, base Result, style string) (Result, []time.Duration, error) {
	res := base
	res.Client = "pgbench-" + style
	res.RoundTrips = RoundTrips[res.Client][base.Path]
	script := filepath.Join(b.scripts, style+"_"+string(base.Path)+".sql")
	threads := base.Clients
	if n := runtime.NumCPU(); threads > n {
		threads = n
	}
	args := func(d time.Duration) []string {
		return []string{"-n", "-M", "prepared", "-c", strconv.Itoa(base.Clients), "-j", strconv.Itoa(threads),
			"-T", strconv.Itoa(int(d.Seconds())),
			"-D", "sources=" + strconv.Itoa(base.Sources), "-D", "org=" + Org.String(),
			"-D", "reason=" + Reason, "-D", "seed=" + SeedKey, "-f", script}
	}
	logDir, err := os.MkdirTemp("", "runledger-pgbench-log-")
	if err != nil {
		return res, nil, err
	}
	defer os.RemoveAll(logDir)

	start := time.Now()
	measureFrom := start.Add(b.opts.Warmup)
	stop := b.showProgress(res, start, measureFrom, measureFrom.Add(b.opts.Duration), nil)
	defer stop()
	if b.opts.Warmup > 0 {
		if _, err := b.pgbenchExec(ctx, logDir, append(args(b.opts.Warmup), url)); err != nil {
			return res, nil, err
		}
	}
	if b.proxy != nil {
		b.proxy.ResetHeld()
	}
	out, err := b.pgbenchExec(ctx, logDir, append(args(b.opts.Duration), "-l", "--log-prefix", filepath.Join(logDir, "tx"), url))
	if err != nil {
		return res, nil, err
	}
	if b.proxy != nil {
		res.HeldMS = float64(b.proxy.MeanHeld()) / float64(time.Millisecond)
	}
	res.Seconds = b.opts.Duration.Seconds()
	if m := reProcessed.FindStringSubmatch(out); m != nil {
		res.Ops, _ = strconv.ParseInt(m[1], 10, 64)
	}
	if m := reFailed.FindStringSubmatch(out); m != nil {
		res.Errors, _ = strconv.ParseInt(m[1], 10, 64)
	}
	if m := reTPS.FindStringSubmatch(out); m != nil {
		res.PerSecond, _ = strconv.ParseFloat(m[1], 64)
	} else {
		res.PerSecond = float64(res.Ops) / res.Seconds
	}
	lat, err := readPgbenchLogs(logDir)
	if err != nil {
		return res, nil, err
	}
	return res, lat, nil
}

// pgbenchExec runs pgbench in dir and returns its standard output; a
// failure includes the end of its error output.
func (b *runner) pgbenchExec(ctx context.Context, dir string, args []string) (string, error) {
	cmd := exec.CommandContext(ctx, b.pgbench, args...)
	cmd.Dir = dir
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			return "", ctx.Err()
		}
		msg := stderr.String()
		if len(msg) > 2000 {
			msg = msg[len(msg)-2000:]
		}
		return "", fmt.Errorf("bench: pgbench %s: %v\n%s", strings.Join(args[:len(args)-1], " "), err, msg)
	}
	return stdout.String(), nil
}

// readPgbenchLogs reads the latencies of pgbench's per-transaction logs
// (client_id transaction_no time script_no time_epoch time_us ..., time
// in microseconds; failed transactions are skipped).
func readPgbenchLogs(dir string) ([]time.Duration, error) {
	files, err := filepath.Glob(filepath.Join(dir, "tx.*"))
	if err != nil {
		return nil, err
	}
	var out []time.Duration
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			return nil, err
		}
		sc := bufio.NewScanner(fh)
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			if len(fields) < 3 {
				continue
			}
			us, err := strconv.ParseInt(fields[2], 10, 64)
			if err != nil {
				continue
			}
			out = append(out, time.Duration(us)*time.Microsecond)
		}
		fh.Close()
		if err := sc.Err(); err != nil {
			return nil, err
		}
	}
	return out, nil
}
