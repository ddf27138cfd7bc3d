package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/google/uuid"

	"github.com/runledger-go/runledger/internal/testdb"
)

// The --from readers as a bounded stream, driven through the built binary
// with a stdin pipe that the test never closes: a bad line, a line too
// long or input beyond --max-input-bytes ends the command (exit 2, nothing
// written) without waiting for the end of the input, and SIGTERM or
// SIGINT ends it while the input is silent.

// streamCommands are the readers of --from, each with a valid line.
var streamCommands = []struct {
	args []string
	line func() string
}{
	{[]string{"replay-bulk", "--key", "k", "--reason", "r", "--from", "-"}, func() string { return uuid.NewString() + " 1" }},
	{[]string{"requeue-bulk", "--reason", "r", "--from", "-"}, func() string { return uuid.NewString() + " DEAD_LETTERED 1" }},
}

// startStreaming starts the binary with args and a stdin pipe it returns;
// feed, when set, writes to the pipe until it breaks (the command ended).
func startStreaming(t *testing.T, c *cli, e env, feed func(w io.Writer) error, args ...string) (*exec.Cmd, io.WriteCloser, *bytes.Buffer, *bytes.Buffer) {
	t.Helper()
	cmd := c.command(t, e, args...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stdin.Close() })
	if feed != nil {
		go func() { _ = feed(stdin) }()
	}
	return cmd, stdin, &stdout, &stderr
}

func exitOf(t *testing.T, cmd *exec.Cmd) int {
	t.Helper()
	err := cmd.Wait()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	if err != nil {
		t.Fatal(err)
	}
	return 0
}

func testFromStreamIsBounded(t *testing.T, c *cli) {
	e := db(t)
	pool := testdb.OpenPool(t, e.databaseURL, 1, nil)
	for _, sc := range streamCommands {
		name := sc.args[0]
		// The first bad line ends the reading: line 3 here, with the pipe
		// still open and more to come.
		cmd, stdin, _, stderr := startStreaming(t, c, e, nil, append(sc.args, "--json")...)
		fmt.Fprintf(stdin, "# sources\n%s\nnot-a-uuid 1 %s\n", sc.line(), strings.Repeat("x", 10000))
		code := exitOf(t, cmd)
		msg := errorMessage(t, outcome{code: code, stderr: stderr.String()}, "validation")
		if code != exitUsage || !strings.Contains(msg, "line 3") || len(msg) > 400 {
			t.Errorf("%s, bad line 3 of an endless pipe: exit %d, message %q: want exit 2 naming line 3 with a bounded excerpt", name, code, msg)
		}

		// A line over the limit is refused with an excerpt.
		cmd, stdin, _, stderr = startStreaming(t, c, e, nil, append(sc.args, "--json")...)
		go func() { _, _ = stdin.Write([]byte(sc.line() + "\n" + strings.Repeat("7", maxInputLine+10))) }()
		code = exitOf(t, cmd)
		msg = errorMessage(t, outcome{code: code, stderr: stderr.String()}, "validation")
		if code != exitUsage || !strings.Contains(msg, "line 2") || !strings.Contains(msg, "longer than") || len(msg) > 400 {
			t.Errorf("%s, a line too long: exit %d, %q", name, code, msg)
		}

		// Valid lines without end stop at the ceiling, named.
		feed := func(w io.Writer) error {
			for {
				if _, err := io.WriteString(w, sc.line()+"\n"); err != nil {
					return err
				}
			}
		}
		cmd, _, _, stderr = startStreaming(t, c, e, feed, append(sc.args, "--max-input-bytes", "64KiB", "--json")...)
		code = exitOf(t, cmd)
		msg = errorMessage(t, outcome{code: code, stderr: stderr.String()}, "validation")
		if code != exitUsage || !strings.Contains(msg, "--max-input-bytes") || !strings.Contains(msg, "65536") {
			t.Errorf("%s, endless valid input: exit %d, %q: want exit 2 naming --max-input-bytes", name, code, msg)
		}
		if out := c.run(t, e, append(sc.args, "--max-input-bytes", "lots")...); out.code != exitUsage || !strings.Contains(out.stderr, "max-input-bytes") {
			t.Errorf("%s --max-input-bytes lots: exit %d, %s", name, out.code, out.stderr)
		}

		// A silent pipe: SIGTERM and SIGINT end the reading at once.
		for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
			cmd, stdin, _, stderr = startStreaming(t, c, e, nil, append(sc.args, "--json")...)
			fmt.Fprintln(stdin, sc.line())
			waitSpooling(t, cmd.Process.Pid)
			if err := cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			code = exitOf(t, cmd)
			msg = errorMessage(t, outcome{code: code, stderr: stderr.String()}, "internal")
			if code != exitError || !strings.Contains(msg, "interrupted while reading --from stdin") {
				t.Errorf("%s, %v while reading: exit %d, %q", name, sig, code, msg)
			}
		}
	}
	if n := testdb.Count(t, pool, "job_replays"); n != 0 {
		t.Errorf("%d lineage rows written", n)
	}
}

// errorMessage checks a --json error on stderr and returns its message.
func errorMessage(t *testing.T, out outcome, category string) string {
	t.Helper()
	wantError(t, out, category)
	return str(t, sub(t, object(t, out.stderr), "error"), "message")
}

// waitSpooling waits until process pid holds its spool of stdin open: it
// is then reading, its signal handling in place.
func waitSpooling(t *testing.T, pid int) {
	t.Helper()
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	testdb.WaitFor(t, "the command to spool stdin", func() bool {
		fds, _ := os.ReadDir(dir)
		for _, fd := range fds {
			if target, err := os.Readlink(filepath.Join(dir, fd.Name())); err == nil && strings.Contains(target, "runledger-from-") {
				return true
			}
		}
		return false
	})
}

func TestParseByteSize(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]int64{"1": 1, "65536": 65536, "64KiB": 64 << 10, "64MiB": 64 << 20, "1GiB": 1 << 30, "2M": 2 << 20, "10B": 10} {
		if got, err := parseByteSize(in); err != nil || got != want {
			t.Errorf("parseByteSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "0", "-1", "lots", "1TiB", "9223372036854775807GiB", "1.5MiB"} {
		if _, err := parseByteSize(in); err == nil {
			t.Errorf("parseByteSize(%q) accepted", in)
		}
	}
}
