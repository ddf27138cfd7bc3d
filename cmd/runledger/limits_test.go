package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/runledger-go/runledger/internal/testdb"
)

// runJSON runs a command line in process against url with --json and
// returns its exit code and its stdout, or its error's message.
func runJSON(t *testing.T, url string, args ...string) (int, string) {
	t.Helper()
	var stdout, stderr syncBuffer
	code := runIn(testdb.Context(t), url, &stdout, &stderr, append(args, "--json")...)
	if code == exitOK {
		return code, stdout.String()
	}
	var e errorJSON
	if err := json.Unmarshal([]byte(stderr.String()), &e); err != nil {
		t.Fatalf("runledger %q: exit %d, stderr not one JSON error: %s", args, code, stderr.String())
	}
	return code, e.Error.Message
}

// TestLimitMessagesNameTheLimit: a value over a limit is refused (exit 2)
// with a --json message that names the limit.
func TestLimitMessagesNameTheLimit(t *testing.T) {
	t.Parallel()
	url := "postgres://u@127.0.0.1:1/never-reached"
	long := strings.Repeat("t", 256)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"claim", "--worker", "w", "--lease", "25h"}, "24h"},
		{[]string{"claim", "--worker", "w", "--lease", "0s"}, "1µs"},
		{[]string{"claim", "--worker", "w", "--limit", "1001"}, "1000"},
		{[]string{"enqueue", "--type", long}, "255 bytes"},
		{[]string{"enqueue", "--type", "t", "--payload", `{"n": 1e131072}`}, "numeric"},
		{[]string{"complete", "--job", "0b6f6f2e-7a8a-4a43-9d2c-8f0f8f0f8f0f", "--run", "1", "--attempt", "1", "--worker", "w", "--output", `["\ud800"]`}, "surrogate"},
		{[]string{"enqueue", "--type", "t", "--payload", `"\u0000"`}, `\u0000`},
	} {
		code, msg := runJSON(t, url, tc.args...)
		if code != exitUsage || !strings.Contains(msg, tc.want) {
			t.Errorf("runledger %q: exit %d, message %q; want exit 2 naming %q", tc.args, code, msg, tc.want)
		}
	}
}

// TestJobTypeTakenExactlyEverywhere: every command takes a job type as
// given, untrimmed: the type " padded " is claimed, counted and bulk
// replayed by that name and by no other, and a blank one is refused by
// all of them.
func TestJobTypeTakenExactlyEverywhere(t *testing.T) {
	t.Parallel()
	url := testdb.NewURL(t)
	const typ = " padded "
	for _, args := range [][]string{
		{"definitions", "upsert", "--type", typ},
		{"enqueue", "--type", typ},
		{"enqueue", "--type", typ},
	} {
		if code, out := runJSON(t, url, args...); code != exitOK {
			t.Fatalf("%q: exit %d: %s", args, code, out)
		}
	}
	if code, out := runJSON(t, url, "claim", "--worker", "w", "--type", "padded", "--limit", "5"); code != exitOK || !strings.Contains(out, `"jobs":[]`) {
		t.Errorf("claim --type padded (trimmed) claimed: exit %d %s", code, out)
	}
	if code, out := runJSON(t, url, "stats", "--type", "padded"); code != exitOK || strings.Contains(out, `"pending_due":2`) {
		t.Errorf("stats --type padded (trimmed) counted the type: exit %d %s", code, out)
	}
	if code, out := runJSON(t, url, "stats", "--type", typ); code != exitOK || !strings.Contains(out, `"job_type":" padded "`) {
		t.Errorf("stats --type %q: exit %d %s", typ, code, out)
	}
	if code, out := runJSON(t, url, "claim", "--worker", "w", "--type", "other,"+typ, "--limit", "5"); code != exitOK || strings.Count(out, `"job_type":" padded "`) != 2 {
		t.Errorf("claim --type %q: exit %d %s", "other,"+typ, code, out)
	}
	for _, args := range [][]string{
		{"claim", "--worker", "w", "--type", " "},
		{"claim", "--worker", "w", "--type", "a, ,b"},
		{"stats", "--type", " "},
		{"replay-bulk", "--type", " ", "--key", "k", "--reason", "r"},
		{"requeue-bulk", "--status", "DEAD_LETTERED", "--type", " ", "--reason", "r"},
		{"enqueue", "--type", " "},
	} {
		if code, msg := runJSON(t, url, args...); code != exitUsage || !strings.Contains(msg, "blank") {
			t.Errorf("%q: exit %d %q, want exit 2: blank", args, code, msg)
		}
	}
}
