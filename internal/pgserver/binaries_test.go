package pgserver

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestNoBinaries(t *testing.T) {
	t.Parallel()
	_, err := Start(context.Background(), Options{BinDir: t.TempDir()})
	if !errors.Is(err, ErrNoBinaries) {
		t.Fatalf("err = %v, want ErrNoBinaries", err)
	}
	for _, want := range []string{"initdb", "postgres", "apt-get install postgresql"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

func TestFindBinDir(t *testing.T) {
	// The machine's own binaries (the test suite needs them anyway).
	dir, err := findBinDir("")
	if err != nil {
		t.Fatalf("findBinDir: %v", err)
	}
	if err := hasServerBinaries(dir); err != nil {
		t.Fatalf("found %s but: %v", dir, err)
	}

	// A PATH entry that symlinks initdb is resolved to the real directory,
	// where postgres lives.
	t.Setenv(EnvBinDir, "")
	link := t.TempDir()
	if err := os.Symlink(filepath.Join(dir, "initdb"), filepath.Join(link, "initdb")); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", link)
	if got, err := findBinDir(""); err != nil || got != dir {
		t.Errorf("via symlink on PATH: got %q, %v; want %q", got, err, dir)
	}

	// An explicit BinDir is the only place looked at.
	if _, err := findBinDir(link); !errors.Is(err, ErrNoBinaries) {
		t.Errorf("BinDir without postgres: err = %v, want ErrNoBinaries", err)
	}
	if got, err := findBinDir(dir); err != nil || got != dir {
		t.Errorf("BinDir %s: got %q, %v", dir, got, err)
	}

	// RUNLEDGER_PG_BINDIR wins over PATH, and is the only place looked at.
	t.Setenv(EnvBinDir, dir)
	if got, err := findBinDir(""); err != nil || got != dir {
		t.Errorf("%s=%s: got %q, %v", EnvBinDir, dir, got, err)
	}
	t.Setenv(EnvBinDir, link)
	if _, err := findBinDir(""); !errors.Is(err, ErrNoBinaries) || !strings.Contains(err.Error(), EnvBinDir) {
		t.Errorf("%s without postgres: err = %v, want ErrNoBinaries naming the variable", EnvBinDir, err)
	}
	// Options.BinDir wins over the variable.
	if got, err := findBinDir(dir); err != nil || got != dir {
		t.Errorf("BinDir %s with %s set: got %q, %v", dir, EnvBinDir, got, err)
	}
}

// TestLibDir: the lib directory beside bin goes on LD_LIBRARY_PATH only
// when it holds versioned shared libraries, ahead of what was there.
func TestLibDir(t *testing.T) {
	root := t.TempDir()
	bin, lib := filepath.Join(root, "bin"), filepath.Join(root, "lib")
	for _, d := range []string{bin, lib} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// Server modules only, like a distribution's lib directory.
	if err := os.WriteFile(filepath.Join(lib, "plpgsql.so"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if got := libDir(bin); got != "" {
		t.Errorf("libDir with modules only = %q, want none", got)
	}
	if err := os.WriteFile(filepath.Join(lib, "libicuuc.so.60.2"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if got := libDir(bin); got != lib {
		t.Errorf("libDir = %q, want %q", got, lib)
	}

	t.Setenv("LD_LIBRARY_PATH", "/elsewhere")
	if got := envValue(childEnv(lib), "LD_LIBRARY_PATH"); got != lib+":/elsewhere" {
		t.Errorf("LD_LIBRARY_PATH = %q, want %q", got, lib+":/elsewhere")
	}
	if got := envValue(childEnv(""), "LD_LIBRARY_PATH"); got != "/elsewhere" {
		t.Errorf("without a lib dir LD_LIBRARY_PATH = %q, want it unchanged", got)
	}
}

// envValue returns the last value of name in env ("" if absent).
func envValue(env []string, name string) string {
	v := ""
	for _, kv := range env {
		if k, val, _ := strings.Cut(kv, "="); k == name {
			v = val
		}
	}
	return v
}

// TestServerVersionIsTheBinaries: the server runs the postgres that
// FindBinDir names (RUNLEDGER_PG_BINDIR under the version matrix), with its
// shared libraries found.
func TestServerVersionIsTheBinaries(t *testing.T) {
	t.Parallel()
	dir, err := FindBinDir("")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(dir, "postgres"), "--version")
	cmd.Env = childEnv(libDir(dir))
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s --version: %v", filepath.Join(dir, "postgres"), err)
	}
	// "postgres (PostgreSQL) 13.23" or "postgres (PostgreSQL) 15.14 (Debian 15.14-0+deb12u1)"
	fields := strings.Fields(string(out))
	if len(fields) < 3 {
		t.Fatalf("unexpected --version output %q", out)
	}
	want := fields[2]

	s := start(t, Options{})
	if s.BinDir() != dir {
		t.Errorf("BinDir() = %q, want %q", s.BinDir(), dir)
	}
	got := queryString(t, connect(t, s.URL("")), "SHOW server_version")
	if got != want && !strings.HasPrefix(got, want+" ") {
		t.Errorf("server_version = %q, want %q (from %s)", got, want, dir)
	}
}

func TestVersionOrder(t *testing.T) {
	t.Parallel()
	cases := []struct {
		in   string
		want []int
	}{
		{"15", []int{15}}, {"9.6", []int{9, 6}}, {"16beta1", []int{16}}, {"x", nil}, {"10.2.1", []int{10, 2, 1}},
	}
	for _, c := range cases {
		if got := parseVersion(c.in); !reflect.DeepEqual(got, c.want) {
			t.Errorf("parseVersion(%q) = %v, want %v", c.in, got, c.want)
		}
	}
	less := [][2]string{{"9.6", "10"}, {"9", "9.6"}, {"x", "9"}, {"15", "16beta1"}}
	for _, c := range less {
		if !versionLess(parseVersion(c[0]), parseVersion(c[1])) || versionLess(parseVersion(c[1]), parseVersion(c[0])) {
			t.Errorf("want %s < %s", c[0], c[1])
		}
	}
}
