package pgserver

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

const (
	// dirPrefix starts the name of every temp dir Start creates; the stale
	// sweep looks only at names with this prefix.
	dirPrefix = "runledger-pgtemp-"
	// ownerFile, in the temp dir, holds the pid of the process that called
	// Start. The postmaster pid alone cannot tell a dead run from a live one
	// that is still inside initdb (no postmaster.pid yet).
	ownerFile = "owner.pid"
	// orphanAge is how old a temp dir with no owner file must be before the
	// sweep removes it. Start writes the owner file right after creating the
	// dir, so only a creator killed in between leaves a dir without one.
	orphanAge = 10 * time.Minute
)

// removeStaleDirs removes, best effort, the server dirs under root that were
// left by runs that died without calling Stop (a crash, SIGKILL, a test
// timeout). A dir is stale when the process that created it is gone and no
// postmaster is running from it; dirs of live runs in other test binaries are
// never touched. It returns the dirs it removed.
func removeStaleDirs(root string, logf func(string, ...any)) []string {
	matches, err := filepath.Glob(filepath.Join(root, dirPrefix+"*"))
	if err != nil {
		return nil
	}
	var removed []string
	for _, dir := range matches {
		fi, err := os.Lstat(dir)
		if err != nil || !fi.IsDir() {
			continue
		}
		if !isStale(dir, fi.ModTime()) {
			continue
		}
		if err := os.RemoveAll(dir); err != nil {
			logf("pgserver: could not remove stale %s: %v", dir, err)
			continue
		}
		logf("pgserver: removed stale %s", dir)
		removed = append(removed, dir)
	}
	return removed
}

// isStale reports whether the server dir can be removed; see removeStaleDirs.
func isStale(dir string, modTime time.Time) bool {
	owner, err := readPID(filepath.Join(dir, ownerFile))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return time.Since(modTime) > orphanAge
	case err != nil:
		return false // unreadable: not ours to judge
	case processAlive(owner):
		return false
	}
	// The owner is gone. Its postmaster dies with it (Pdeathsig) but may
	// still be shutting down; leave the dir for a later sweep.
	if pm, err := readPID(filepath.Join(dir, "data", "postmaster.pid")); err == nil && processAlive(pm) {
		return false
	}
	return true
}

// readPID returns the number on the first line of a pid file (the format of
// both owner.pid and postmaster.pid).
func readPID(path string) (int, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	line, err := bufio.NewReader(f).ReadString('\n')
	if err != nil && line == "" {
		return 0, fmt.Errorf("read %s: %w", path, err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		return 0, fmt.Errorf("parse %s: %w", path, err)
	}
	return pid, nil
}
