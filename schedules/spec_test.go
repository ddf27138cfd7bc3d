package schedules

import (
	"errors"
	"testing"
	"time"

	"github.com/runledger-go/runledger"
)

func mustSpec(t *testing.T, expr, tz string) spec {
	t.Helper()
	sp, err := parseSpec(expr, tz)
	if err != nil {
		t.Fatalf("parse %q in %q: %v", expr, tz, err)
	}
	return sp
}

// TestSpecAcrossDST: 09:00 Europe/Berlin is 08:00 UTC before the change
// to summer time (2026-03-29) and 07:00 UTC after it.
func TestSpecAcrossDST(t *testing.T) {
	t.Parallel()
	sp := mustSpec(t, "0 9 * * *", "Europe/Berlin")
	cases := []struct{ after, want string }{
		{"2026-03-27T12:00:00Z", "2026-03-28T08:00:00Z"},
		{"2026-03-28T12:00:00Z", "2026-03-29T07:00:00Z"},
		{"2026-10-24T12:00:00Z", "2026-10-25T08:00:00Z"}, // back to winter time
	}
	for _, c := range cases {
		after, _ := time.Parse(time.RFC3339, c.after)
		if got := sp.next(after).Format(time.RFC3339); got != c.want {
			t.Errorf("next after %s = %s, want %s", c.after, got, c.want)
		}
	}
	// 02:30 does not exist on 2026-03-29 in Berlin (skipped), and occurs
	// twice on 2026-10-25 (fired once, in summer time); an hour field of
	// "*" fires in both passes of the repeated hour.
	night := mustSpec(t, "30 2 * * *", "Europe/Berlin")
	for _, c := range []struct {
		after string
		want  []string
	}{
		{"2026-03-28T00:00:00Z", []string{"2026-03-28T01:30:00Z", "2026-03-30T00:30:00Z"}},
		{"2026-10-24T00:00:00Z", []string{"2026-10-24T00:30:00Z", "2026-10-25T00:30:00Z", "2026-10-26T01:30:00Z"}},
	} {
		at, _ := time.Parse(time.RFC3339, c.after)
		for _, want := range c.want {
			at = night.next(at)
			if got := at.Format(time.RFC3339); got != want {
				t.Errorf("02:30 Berlin: got %s, want %s", got, want)
			}
		}
	}
	hourly := mustSpec(t, "30 * * * *", "Europe/Berlin")
	at, _ := time.Parse(time.RFC3339, "2026-10-25T00:00:00Z")
	for _, want := range []string{"2026-10-25T00:30:00Z", "2026-10-25T01:30:00Z", "2026-10-25T02:30:00Z"} {
		at = hourly.next(at)
		if got := at.Format(time.RFC3339); got != want {
			t.Errorf("hourly over the repeated hour: got %s, want %s", got, want)
		}
	}

	// The same expression in UTC ignores the change.
	utc := mustSpec(t, "0 9 * * *", "")
	after, _ := time.Parse(time.RFC3339, "2026-03-28T12:00:00Z")
	if got := utc.next(after).Format(time.RFC3339); got != "2026-03-29T09:00:00Z" {
		t.Errorf("UTC next = %s", got)
	}
}

func TestSpecSecondsAndTicks(t *testing.T) {
	t.Parallel()
	sp := mustSpec(t, "*/10 * * * * *", "UTC")
	from, _ := time.Parse(time.RFC3339, "2026-01-01T00:00:00Z")
	to := from.Add(time.Hour + 5*time.Second)
	got := sp.lastTicks(from, to, 3)
	want := []string{"2026-01-01T00:59:40Z", "2026-01-01T00:59:50Z", "2026-01-01T01:00:00Z"}
	if len(got) != 3 {
		t.Fatalf("lastTicks = %v", got)
	}
	for i := range want {
		if got[i].Format(time.RFC3339) != want[i] {
			t.Errorf("tick %d = %s, want %s", i, got[i].Format(time.RFC3339), want[i])
		}
	}
	// Fewer ticks than asked: all of them, from the cursor on (inclusive).
	got = sp.lastTicks(from, from.Add(15*time.Second), 5)
	if len(got) != 2 || !got[0].Equal(from) {
		t.Errorf("lastTicks from the cursor = %v", got)
	}
	if got := sp.lastTicks(from, from.Add(-time.Second), 1); len(got) != 0 {
		t.Errorf("lastTicks of an empty range = %v", got)
	}
}

func TestSpecRefused(t *testing.T) {
	t.Parallel()
	cases := []struct {
		expr, tz string
		code     runledger.Code
	}{
		{"", "", CodeCronInvalid},
		{"* * *", "", CodeCronInvalid},
		{"61 * * * *", "", CodeCronInvalid},
		{"* * * * * * *", "", CodeCronInvalid},
		{"@hourly", "", CodeCronInvalid},
		{"CRON_TZ=UTC * * * * *", "", CodeCronInvalid},
		{"0 0 30 2 *", "", CodeCronInvalid}, // never fires
		{"* * * * *", "Mars/Olympus", CodeTimezoneInvalid},
		{"* * * * *", "Local", CodeTimezoneInvalid},
	}
	for _, c := range cases {
		_, err := parseSpec(c.expr, c.tz)
		var e *runledger.Error
		if !errors.As(err, &e) || e.Code != c.code || e.Category != runledger.CategoryValidation {
			t.Errorf("parse %q in %q: %v, want %s", c.expr, c.tz, err, c.code)
		}
	}
}

func TestJitterIsStableAndBounded(t *testing.T) {
	t.Parallel()
	tick, _ := time.Parse(time.RFC3339, "2026-01-01T00:00:00Z")
	seen := map[time.Duration]bool{}
	for i := 0; i < 200; i++ {
		d := jitterOf("s", tick.Add(time.Duration(i)*time.Minute), 5)
		if d < 0 || d > 5*time.Second || d%time.Second != 0 {
			t.Fatalf("jitter %s out of 0..5s", d)
		}
		seen[d] = true
	}
	if len(seen) < 4 {
		t.Errorf("jitter takes only %d values", len(seen))
	}
	first := jitterOf("s", tick, 5)
	if again := jitterOf("s", tick, 5); again != first || jitterOf("s", tick, 0) != 0 {
		t.Error("jitter is not a function of name and tick")
	}
}
