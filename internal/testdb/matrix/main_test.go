package main

import (
	"strings"
	"testing"
)

// TestTally counts tests and subtests by outcome, reports a package that
// failed outside any test, and prints only the failures' output.
func TestTally(t *testing.T) {
	in := strings.Join([]string{
		`{"Action":"run","Package":"p","Test":"TestA"}`,
		`{"Action":"output","Package":"p","Test":"TestA","Output":"ok line\n"}`,
		`{"Action":"pass","Package":"p","Test":"TestA"}`,
		`{"Action":"run","Package":"p","Test":"TestB"}`,
		`{"Action":"output","Package":"p","Test":"TestB/sub","Output":"boom\n"}`,
		`{"Action":"fail","Package":"p","Test":"TestB/sub"}`,
		`{"Action":"fail","Package":"p","Test":"TestB"}`,
		`{"Action":"skip","Package":"p","Test":"TestC"}`,
		`{"Action":"fail","Package":"p"}`,
		`{"Action":"output","Package":"q","Output":"q.go:1: undefined: x\n"}`,
		`{"Action":"fail","Package":"q"}`,
		`# plain build output`,
	}, "\n")
	var r result
	var out strings.Builder
	tally(&r, strings.NewReader(in), &out)
	if r.passed != 1 || r.failed != 2 || r.skipped != 1 {
		t.Errorf("passed %d, failed %d, skipped %d; want 1, 2, 1", r.passed, r.failed, r.skipped)
	}
	if strings.Join(r.pkgFailed, ",") != "p,q" {
		t.Errorf("failed packages = %v, want [p q]", r.pkgFailed)
	}
	got := out.String()
	for _, want := range []string{"TestB/sub failed:\nboom", "undefined: x", "# plain build output"} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "ok line") {
		t.Errorf("output of a passing test printed:\n%s", got)
	}
}

// TestTable fails a major that ran no test or could not run, and a failure.
func TestTable(t *testing.T) {
	cases := []struct {
		name string
		r    result
		ok   bool
	}{
		{"all passed", result{major: "13", server: "13.23", passed: 5, skipped: 1}, true},
		{"a failure", result{major: "14", passed: 5, failed: 1}, false},
		{"no test", result{major: "15"}, false},
		{"package failed", result{major: "16", passed: 3, pkgFailed: []string{"p"}}, false},
	}
	for _, c := range cases {
		var out strings.Builder
		if got := printTable(&out, []result{c.r}); got != c.ok {
			t.Errorf("%s: ok = %v, want %v\n%s", c.name, got, c.ok, out.String())
		}
		if !strings.Contains(out.String(), "matrix: ") {
			t.Errorf("%s: no closing line:\n%s", c.name, out.String())
		}
	}
}
