package main

import (
	"errors"
	"fmt"
	"reflect"
	"testing"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/internal/errs"
)

func TestExitCodeMapping(t *testing.T) {
	t.Parallel()
	cases := []struct {
		err  error
		want int
	}{
		{errs.Validation("x.y", "m").New(""), exitUsage},
		{errs.JobNotFound.New("d"), exitNotFound},
		{errs.DefinitionMissing.New("d"), exitNotFound},
		{errs.ReplayIdempotencyConflict.New("d"), exitConflict},
		{errs.IdempotencyConflict.New("d"), exitConflict},
		{errs.LeaseMismatch.New("d"), exitMismatch},
		{fmt.Errorf("wrapped: %w", errs.LeaseMismatch.New("d")), exitMismatch},
		{errs.Transient.New("d"), exitError},
		{errs.CommitUnconfirmed.New("d"), exitError},
		{errs.ReplaySourceUnstable.New("d"), exitError},
		{&runledger.Error{Code: "db.permission_denied", Category: runledger.CategoryForbidden}, exitError},
		{errors.New("not a runledger error"), exitError},
	}
	for _, tc := range cases {
		if got := exitCode(tc.err); got != tc.want {
			t.Errorf("exitCode(%v) = %d, want %d", tc.err, got, tc.want)
		}
	}
}

func TestParseInterleaved(t *testing.T) {
	t.Parallel()
	cases := []struct {
		args []string
		pos  []string
		org  string
	}{
		{[]string{"A", "--org", "O"}, []string{"A"}, "O"},
		{[]string{"--org", "O", "A"}, []string{"A"}, "O"},
		{[]string{"--org=O", "A", "B"}, []string{"A", "B"}, "O"},
		{[]string{"A", "--", "--org", "O"}, []string{"A", "--org", "O"}, ""},
		{[]string{"--", "-A"}, []string{"-A"}, ""},
		{nil, nil, ""},
	}
	for _, tc := range cases {
		fs := newFlagSet("t")
		org := fs.str("org", "`UUID` org")
		pos, err := fs.parse("t", tc.args)
		if err != nil || !reflect.DeepEqual(pos, tc.pos) || *org != tc.org {
			t.Errorf("parse(%q) = %q, org %q, %v; want %q, org %q", tc.args, pos, *org, err, tc.pos, tc.org)
		}
	}
	for _, tc := range []struct {
		args    []string
		enabled string
		reason  string
		pos     []string
	}{
		{[]string{"--enabled", "false"}, "false", "", nil},
		{[]string{"--enabled=false"}, "false", "", nil},
		{[]string{"--enabled"}, "true", "", nil},
		{[]string{"--enabled", "true", "A"}, "true", "", []string{"A"}},
		{[]string{"--reason", "--enabled", "false"}, "unset", "--enabled", []string{"false"}},
		{[]string{"--", "--enabled", "false"}, "unset", "", []string{"--enabled", "false"}},
	} {
		fs := newFlagSet("t")
		enabled := fs.boolOpt("enabled", "on")
		reason := fs.str("reason", "`R` why")
		pos, err := fs.parse("t", tc.args)
		got := "unset"
		if *enabled != nil {
			got = fmt.Sprint(**enabled)
		}
		if err != nil || got != tc.enabled || *reason != tc.reason || !reflect.DeepEqual(pos, tc.pos) {
			t.Errorf("parse(%q) = enabled %s, reason %q, %q, %v", tc.args, got, *reason, pos, err)
		}
	}

	fs := newFlagSet("t")
	fs.str("need", "`X` needed")
	fs.requireFlag("need")
	if _, err := fs.parse("t", []string{"A"}); runledger.CodeOf(err) != codeUsage {
		t.Errorf("missing required flag: %v", err)
	}
}

func TestWantsJSON(t *testing.T) {
	t.Parallel()
	cases := map[string]struct {
		args []string
		want bool
	}{
		"absent":          {[]string{"enqueue", "--type", "t"}, false},
		"double dash":     {[]string{"enqueue", "--json"}, true},
		"single dash":     {[]string{"-json", "enqueue"}, true},
		"explicit false":  {[]string{"--json", "x", "--json=false"}, false},
		"explicit true":   {[]string{"--json=true"}, true},
		"after separator": {[]string{"jobs", "show", "--", "--json"}, false},
	}
	for name, tc := range cases {
		if got := wantsJSON(tc.args); got != tc.want {
			t.Errorf("%s: wantsJSON(%q) = %v", name, tc.args, got)
		}
	}
}

// TestRegistry: every command has documentation, its flags have
// placeholders and text, and names are unique.
func TestRegistry(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for _, c := range commands {
		if seen[c.name] {
			t.Errorf("duplicate command %q", c.name)
		}
		seen[c.name] = true
		if c.summary == "" || c.help == "" || c.setup == nil {
			t.Errorf("%s: missing summary, help or setup", c.name)
		}
		if w := c.words(); len(w) > 1 {
			if _, ok := groups[w[0]]; !ok {
				t.Errorf("%s: group %q has no description", c.name, w[0])
			}
		}
		fs := newFlagSet(c.name)
		defineGlobalFlags(fs, false, "")
		c.setup(fs)
		for _, name := range fs.order {
			f := fs.Lookup(name)
			if f.Usage == "" {
				t.Errorf("%s --%s: no usage text", c.name, name)
			}
			if !isBool(f) {
				if placeholder, _ := unquote(f.Usage); placeholder == "" {
					t.Errorf("%s --%s: usage has no `PLACEHOLDER`", c.name, name)
				}
			}
		}
	}
}

// unquote returns the backquoted placeholder of a usage string.
func unquote(usage string) (string, bool) {
	for i := 0; i < len(usage); i++ {
		if usage[i] == '`' {
			for j := i + 1; j < len(usage); j++ {
				if usage[j] == '`' {
					return usage[i+1 : j], true
				}
			}
		}
	}
	return "", false
}

func TestResumeCommandHidesThePassword(t *testing.T) {
	t.Parallel()
	cases := []struct {
		argv []string
		want string
	}{
		{[]string{"replay-bulk", "--key", "k", "--reason", "lost invoices", "--from", "-"},
			"runledger replay-bulk --key k --reason 'lost invoices' --from -"},
		{[]string{"--json", "replay-bulk", "--database-url", "postgres://u:secret@h:5432/d", "--type", "t"},
			"runledger --json replay-bulk --database-url postgres://u:xxxxx@h:5432/d --type t"},
		{[]string{"replay-bulk", "--database-url=postgres://u@h/d", "--type", "t"},
			"runledger replay-bulk --database-url=postgres://u@h/d --type t"},
		{[]string{"replay-bulk", "-database-url", "host=h password='s p' user=u", "--type", "t"},
			"runledger replay-bulk -database-url 'host=h password=xxxxx user=u' --type t"},
	}
	for _, tc := range cases {
		if got := resumeCommand(tc.argv); got != tc.want {
			t.Errorf("resumeCommand(%q)\n got %s\nwant %s", tc.argv, got, tc.want)
		}
	}
	if !isStdin([]string{"replay-bulk", "--from", "-"}) || !isStdin([]string{"--from=-"}) || isStdin([]string{"--from", "list.txt", "--reason", "-"}) {
		t.Error("isStdin")
	}
}

func TestGroupDigits(t *testing.T) {
	t.Parallel()
	for n, want := range map[int]string{0: "0", 999: "999", 1000: "1,000", 1234567: "1,234,567", -12345: "-12,345"} {
		if got := groupDigits(n); got != want {
			t.Errorf("groupDigits(%d) = %q, want %q", n, got, want)
		}
	}
}

// TestNormalizeArgs: every spelling the command line accepts reaches pflag
// in the one it reads, and values are never rewritten.
func TestNormalizeArgs(t *testing.T) {
	t.Parallel()
	fs := newFlagSet("t")
	fs.boolOpt("enabled", "on")
	fs.str("reason", "`R` why")
	cases := []struct {
		args, want []string
	}{
		{[]string{"-reason", "r", "-enabled"}, []string{"--reason", "r", "--enabled"}},
		{[]string{"-reason=r", "-enabled=false"}, []string{"--reason=r", "--enabled=false"}},
		{[]string{"--enabled", "false", "A"}, []string{"--enabled=false", "A"}},
		{[]string{"-enabled", "true"}, []string{"--enabled=true"}},
		{[]string{"--reason", "-enabled", "false"}, []string{"--reason", "-enabled", "false"}},
		{[]string{"--reason", "-h"}, []string{"--reason", "-h"}},
		{[]string{"-colour", "red"}, []string{"--colour", "red"}},
		{[]string{"--enabled", "-h", "--colour"}, []string{"--enabled", "--help"}},
		{[]string{"-help"}, []string{"--help"}},
		{[]string{"--h"}, []string{"--help"}},
		{[]string{"A", "--", "-enabled", "-h"}, []string{"A", "--", "-enabled", "-h"}},
		{[]string{"-", "-enabled"}, []string{"-", "--enabled"}},
	}
	for _, tc := range cases {
		if got := normalizeArgs(tc.args, fs.Lookup, false); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("normalizeArgs(%q) = %q, want %q", tc.args, got, tc.want)
		}
	}
	// Before the command only the leading flags are rewritten.
	if got, want := normalizeArgs([]string{"-enabled", "cmd", "-reason", "r"}, fs.Lookup, true), []string{"--enabled", "cmd", "-reason", "r"}; !reflect.DeepEqual(got, want) {
		t.Errorf("untilPositional: %q, want %q", got, want)
	}
}
