package pgserver

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// EnvBinDir names an environment variable holding the directory of the
// initdb and postgres to run, for every caller that does not pass
// Options.BinDir (the tests, the demo, the benchmarks). When it is set it is
// the only place looked at: a directory without the programs is an error,
// not a reason to fall back to the machine's own binaries. tools/pgbin
// prints such a directory for each PostgreSQL major from 13 to 18.
const EnvBinDir = "RUNLEDGER_PG_BINDIR"

// ErrNoBinaries is returned (wrapped, with the places searched and an install
// hint) by Start when no directory holding both initdb and postgres can be
// found. Match it with errors.Is.
var ErrNoBinaries = errors.New("no PostgreSQL server binaries found (initdb, postgres)")

// installHint tells a reader what to do about ErrNoBinaries.
const installHint = "install the PostgreSQL server package " +
	"(Debian/Ubuntu: apt-get install postgresql; Fedora/RHEL: dnf install postgresql-server; " +
	"macOS: brew install postgresql) or put its bin directory on PATH"

// serverBinaries are the programs pgserver runs. pg_ctl is not among them:
// the server is started as a direct child so that Pdeathsig applies to it.
var serverBinaries = []string{"initdb", "postgres"}

// versionedGlobs are where distribution packages install versioned server
// binaries that are not on PATH (Debian's postgresql-NN, PGDG's RPMs).
var versionedGlobs = []string{
	"/usr/lib/postgresql/*/bin",
	"/usr/pgsql-*/bin",
}

// FindBinDir returns the directory Start would run initdb and postgres from:
// override if set (and nothing else), else $RUNLEDGER_PG_BINDIR (EnvBinDir)
// if set (and nothing else), else the directory that initdb (or
// postgres) on PATH resolves to after following symlinks, else the newest
// /usr/lib/postgresql/*/bin or /usr/pgsql-*/bin (versions compared
// numerically). It runs nothing. When none qualifies the error wraps
// ErrNoBinaries and says where it looked and what to install.
func FindBinDir(override string) (string, error) {
	dir, err := findBinDir(override)
	if err != nil {
		return "", fmt.Errorf("pgserver: %w", err)
	}
	return dir, nil
}

func findBinDir(override string) (string, error) {
	if override != "" {
		if err := hasServerBinaries(override); err != nil {
			return "", fmt.Errorf("%w in BinDir %s (%v); %s", ErrNoBinaries, override, err, installHint)
		}
		return override, nil
	}
	if env := os.Getenv(EnvBinDir); env != "" {
		if err := hasServerBinaries(env); err != nil {
			return "", fmt.Errorf("%w in %s=%s (%v); point it at a bin directory holding both "+
				"(tools/pgbin MAJOR prints one) or unset it", ErrNoBinaries, EnvBinDir, env, err)
		}
		return env, nil
	}

	var tried []string
	// initdb on PATH is often a symlink (/usr/local/bin/initdb ->
	// /usr/lib/postgresql/15/bin/initdb); postgres lives beside the target.
	for _, name := range serverBinaries {
		p, err := exec.LookPath(name)
		if err != nil {
			continue
		}
		real, err := filepath.EvalSymlinks(p)
		if err != nil {
			continue
		}
		dir := filepath.Dir(real)
		if hasServerBinaries(dir) == nil {
			return dir, nil
		}
		tried = append(tried, dir)
	}

	for _, dir := range versionedDirs() {
		if hasServerBinaries(dir) == nil {
			return dir, nil
		}
		tried = append(tried, dir)
	}

	where := "PATH, " + strings.Join(versionedGlobs, ", ")
	if len(tried) > 0 {
		where += "; incomplete: " + strings.Join(tried, ", ")
	}
	return "", fmt.Errorf("%w (searched %s); %s", ErrNoBinaries, where, installHint)
}

// hasServerBinaries reports why dir cannot be used, or nil if it holds an
// executable initdb and postgres.
func hasServerBinaries(dir string) error {
	for _, name := range serverBinaries {
		p := filepath.Join(dir, name)
		fi, err := os.Stat(p)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
			return fmt.Errorf("%s: not an executable file", p)
		}
	}
	return nil
}

// versionedDirs lists the existing versioned bin directories, newest major
// version first ("15" before "9.6": versions compare numerically).
func versionedDirs() []string {
	type cand struct {
		dir string
		ver []int
	}
	var cands []cand
	for _, g := range versionedGlobs {
		matches, _ := filepath.Glob(g) // the patterns are constant and valid
		star := strings.Index(g, "*")
		for _, m := range matches {
			// The version is what the * matched: strip the fixed prefix
			// and suffix of the pattern.
			v := strings.TrimSuffix(m[star:], g[star+1:])
			cands = append(cands, cand{dir: m, ver: parseVersion(v)})
		}
	}
	sort.SliceStable(cands, func(i, j int) bool { return versionLess(cands[j].ver, cands[i].ver) })
	dirs := make([]string, len(cands))
	for i, c := range cands {
		dirs[i] = c.dir
	}
	return dirs
}

// parseVersion turns "9.6" into [9 6]; a part that is not a number ends the
// version, so "16beta1" is [16] and a name with no number is [] (oldest).
func parseVersion(s string) []int {
	var out []int
	for _, part := range strings.Split(s, ".") {
		digits := part
		if i := strings.IndexFunc(part, func(r rune) bool { return r < '0' || r > '9' }); i >= 0 {
			digits = part[:i]
		}
		n, err := strconv.Atoi(digits)
		if err != nil {
			break
		}
		out = append(out, n)
		if len(digits) != len(part) {
			break
		}
	}
	return out
}

// versionLess compares versions part by part; a prefix is the smaller.
func versionLess(a, b []int) bool {
	for i := 0; i < len(a) && i < len(b); i++ {
		if a[i] != b[i] {
			return a[i] < b[i]
		}
	}
	return len(a) < len(b)
}

// libDir returns the lib directory beside binDir when it holds versioned
// shared libraries (lib*.so.N, as a relocatable build such as the ones
// tools/pgbin fetches ships its ICU, OpenSSL and libxml2), else "". The
// server programs then run with it first on LD_LIBRARY_PATH. A
// distribution's lib directory holds only server modules (plpgsql.so and
// the like), so the machine's own binaries run with the environment
// unchanged.
func libDir(binDir string) string {
	dir := filepath.Join(filepath.Dir(filepath.Clean(binDir)), "lib")
	matches, _ := filepath.Glob(filepath.Join(dir, "lib*.so.[0-9]*")) // constant, valid pattern
	if len(matches) == 0 {
		return ""
	}
	return dir
}
