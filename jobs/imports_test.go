package jobs_test

import (
	"go/build"
	"path/filepath"
	"strings"
	"testing"
)

const module = "github.com/runledger-go/runledger"

// TestWritesAndLeaseImportNoOtherJobIdea checks the split of the job
// packages, through every package of the module they import: the writes
// (jobs) and the lease protocol (lease) import neither replay nor
// requeue, nor each other, nor the read model (inspect).
func TestWritesAndLeaseImportNoOtherJobIdea(t *testing.T) {
	t.Parallel()
	for pkg, forbidden := range map[string][]string{
		"jobs":  {"replay", "requeue", "lease", "inspect"},
		"lease": {"replay", "requeue", "jobs", "inspect"},
	} {
		banned := map[string]bool{}
		for _, f := range forbidden {
			banned[module+"/"+f] = true
		}
		seen := map[string]bool{}
		var walk func(path string, via []string)
		walk = func(path string, via []string) {
			if seen[path] || (path != module && !strings.HasPrefix(path, module+"/")) {
				return
			}
			seen[path] = true
			via = append(via, path)
			if banned[path] {
				t.Errorf("%s imports %s (%s)", pkg, path, strings.Join(via, " -> "))
				return
			}
			p, err := build.ImportDir(filepath.Join("..", strings.TrimPrefix(strings.TrimPrefix(path, module), "/")), 0)
			if err != nil {
				t.Fatalf("read package %s: %v", path, err)
			}
			for _, imp := range p.Imports {
				walk(imp, via)
			}
		}
		walk(module+"/"+pkg, nil)
		if !seen[module+"/internal/txn"] {
			t.Fatalf("%s: the walk did not reach internal/txn; it read %d packages", pkg, len(seen))
		}
	}
}
