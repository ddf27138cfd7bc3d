// Command matrix runs test packages once per PostgreSQL major and prints a
// table of the results: `make test-matrix` runs it.
//
// For each major it asks tools/pgbin for that major's server binaries
// (fetching them on first use), then runs `go test -json -count=1` on the
// packages with RUNLEDGER_PG_BINDIR pointing at them, so that every server
// the tests start (the shared test server and the dedicated ones of the
// restart and kill tests) is of that major. RUNLEDGER_TEST_DATABASE_URL is
// removed from the tests' environment: a configured server would hide the
// version under test.
//
// Usage:
//
//	go run ./internal/testdb/matrix [-versions 13,14,...] [-short] [-race] [-out DIR] [packages]
//
// It prints the go test output of each failed test, then one row per major
// (tests counted with their subtests), then a closing line "matrix: N
// passed, N failed, N skipped". It exits 1 if any test or package failed,
// or a major ran no test at all.
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// defaultPackages are the library suites, the plan audit and the quick
// packages around them.
var defaultPackages = []string{
	".", "./db/", "./replay/", "./requeue/", "./health/", "./jobs/", "./lease/", "./inspect/", "./schedules/", "./worker/", "./goose/", "./reliability/",
	"./internal/dberr/", "./internal/txn/", "./internal/rows/", "./internal/failpoint/", "./internal/bulk/",
	"./internal/testdb/", "./internal/pgserver/", "./internal/testdb/planaudit/",
}

// event is one line of `go test -json` (test2json's TestEvent).
type event struct {
	Action  string
	Package string
	Test    string
	Output  string
}

// result is one major's tally.
type result struct {
	major, server string
	passed        int
	failed        int
	skipped       int
	pkgFailed     []string // packages that failed outside any test (build, TestMain, timeout)
	seconds       float64
	err           error // the run could not be made (fetch, go test start)
}

func main() {
	versions := flag.String("versions", "13,14,15,16,17,18", "comma-separated PostgreSQL majors")
	short := flag.Bool("short", false, "pass -short to go test")
	race := flag.Bool("race", false, "pass -race to go test")
	timeout := flag.Duration("timeout", 20*time.Minute, "go test -timeout for each major")
	out := flag.String("out", "", "directory for each major's go test -json output (default: a new temp dir)")
	pgbin := flag.String("pgbin", "tools/pgbin", "the script that prints a major's bin directory")
	flag.Parse()
	pkgs := flag.Args()
	if len(pkgs) == 0 {
		pkgs = defaultPackages
	}
	if *out == "" {
		d, err := os.MkdirTemp("", "runledger-matrix-")
		if err != nil {
			fatal(err)
		}
		*out = d
	} else if err := os.MkdirAll(*out, 0o755); err != nil {
		fatal(err)
	}

	args := []string{"test", "-json", "-count=1", "-timeout", timeout.String()}
	if *short {
		args = append(args, "-short")
	}
	if *race {
		args = append(args, "-race")
	}
	args = append(args, pkgs...)

	var results []result
	for _, major := range strings.Split(*versions, ",") {
		major = strings.TrimSpace(major)
		fmt.Printf("== PostgreSQL %s: go %s\n", major, strings.Join(args, " "))
		r := runMajor(major, *pgbin, args, filepath.Join(*out, "pg"+major+".json"))
		if r.err != nil {
			fmt.Printf("   %v\n", r.err)
		} else {
			fmt.Printf("   %s: %d passed, %d failed, %d skipped in %.1fs\n", r.server, r.passed, r.failed, r.skipped, r.seconds)
		}
		results = append(results, r)
	}

	ok := printTable(os.Stdout, results)
	fmt.Printf("go test -json output per major: %s\n", *out)
	if !ok {
		os.Exit(1)
	}
}

// runMajor fetches one major's binaries and runs the tests on them, writing
// go test's JSON to jsonPath and printing the output of failed tests.
func runMajor(major, pgbin string, args []string, jsonPath string) result {
	r := result{major: major}
	fetch := exec.Command(pgbin, major)
	fetch.Stderr = os.Stderr
	b, err := fetch.Output()
	if err != nil {
		r.err = fmt.Errorf("%s %s: %w", pgbin, major, err)
		return r
	}
	binDir := strings.TrimSpace(string(b))
	if r.server, err = serverVersion(binDir); err != nil {
		r.err = err
		return r
	}

	f, err := os.Create(jsonPath)
	if err != nil {
		r.err = err
		return r
	}
	defer f.Close()

	cmd := exec.Command("go", args...)
	cmd.Env = append(withoutEnv(os.Environ(), "RUNLEDGER_TEST_DATABASE_URL", "RUNLEDGER_PG_BINDIR"),
		"RUNLEDGER_PG_BINDIR="+binDir)
	cmd.Stderr = os.Stderr // build errors
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		r.err = err
		return r
	}
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		r.err = err
		return r
	}
	tally(&r, io.TeeReader(stdout, f), os.Stdout)
	_ = cmd.Wait() // failures are counted from the events; the exit code adds nothing
	r.seconds = time.Since(t0).Seconds()
	return r
}

// tally reads go test -json events, counts test outcomes into r and writes
// the output of every failed test (and failed package) to w.
func tally(r *result, in io.Reader, w io.Writer) {
	outputs := map[string]*bytes.Buffer{} // by package and test
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var e event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil || e.Action == "" {
			// Not an event (go test prints some build errors as plain text).
			fmt.Fprintln(w, sc.Text())
			continue
		}
		key := e.Package + " " + e.Test
		switch e.Action {
		case "output":
			buf := outputs[key]
			if buf == nil {
				buf = &bytes.Buffer{}
				outputs[key] = buf
			}
			buf.WriteString(e.Output)
		case "pass", "skip", "fail":
			if e.Test == "" {
				if e.Action == "fail" {
					r.pkgFailed = append(r.pkgFailed, e.Package)
					fmt.Fprintf(w, "--- package %s failed:\n%s", e.Package, lastLines(outputs[key], 60))
				}
			} else {
				switch e.Action {
				case "pass":
					r.passed++
				case "skip":
					r.skipped++
				case "fail":
					r.failed++
					fmt.Fprintf(w, "--- %s %s failed:\n%s", e.Package, e.Test, lastLines(outputs[key], 60))
				}
			}
			delete(outputs, key)
		}
	}
}

// lastLines returns the last n lines of buf.
func lastLines(buf *bytes.Buffer, n int) string {
	if buf == nil {
		return ""
	}
	lines := strings.SplitAfter(buf.String(), "\n")
	if len(lines) > n {
		lines = append([]string{"    ...\n"}, lines[len(lines)-n:]...)
	}
	return strings.Join(lines, "")
}

// serverVersion runs binDir/postgres --version with the lib directory beside
// it on LD_LIBRARY_PATH (as package pgserver runs it) and returns the version,
// e.g. "13.23".
func serverVersion(binDir string) (string, error) {
	cmd := exec.Command(filepath.Join(binDir, "postgres"), "--version")
	lib := filepath.Join(filepath.Dir(binDir), "lib")
	ld := lib
	if v := os.Getenv("LD_LIBRARY_PATH"); v != "" {
		ld += ":" + v
	}
	cmd.Env = append(withoutEnv(os.Environ(), "LD_LIBRARY_PATH"), "LD_LIBRARY_PATH="+ld)
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("%s --version: %w", filepath.Join(binDir, "postgres"), err)
	}
	fields := strings.Fields(string(out)) // postgres (PostgreSQL) 13.23
	if len(fields) < 3 {
		return "", fmt.Errorf("%s --version printed %q", filepath.Join(binDir, "postgres"), out)
	}
	return fields[2], nil
}

// withoutEnv returns env without the named variables.
func withoutEnv(env []string, names ...string) []string {
	var out []string
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		drop := false
		for _, n := range names {
			drop = drop || name == n
		}
		if !drop {
			out = append(out, kv)
		}
	}
	return out
}

// printTable writes the table and the closing line and reports whether
// every major ran tests and none failed.
func printTable(w io.Writer, results []result) bool {
	ok := true
	var passed, failed, skipped int
	fmt.Fprintf(w, "\n%-10s  %-8s  %6s  %6s  %6s  %7s  %8s  %s\n",
		"PostgreSQL", "server", "tests", "passed", "failed", "skipped", "seconds", "notes")
	for _, r := range results {
		note := ""
		switch {
		case r.err != nil:
			note = "not run: " + r.err.Error()
		case len(r.pkgFailed) > 0:
			note = "package failed: " + strings.Join(r.pkgFailed, ", ")
		case r.passed+r.failed == 0:
			note = "no test ran"
		}
		if note != "" || r.failed > 0 {
			ok = false
		}
		fmt.Fprintf(w, "%-10s  %-8s  %6d  %6d  %6d  %7d  %8.1f  %s\n",
			r.major, r.server, r.passed+r.failed+r.skipped, r.passed, r.failed, r.skipped, r.seconds, note)
		passed += r.passed
		failed += r.failed
		skipped += r.skipped
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "matrix: %d passed, %d failed, %d skipped\n", passed, failed, skipped)
	return ok
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "matrix:", err)
	os.Exit(1)
}
