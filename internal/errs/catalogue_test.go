package errs_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/internal/errs"
)

// codeLiteral matches a quoted error code in Go source.
var codeLiteral = regexp.MustCompile(`"((?:job|db|cli|worker|health|schedule|console)\.[a-z_]+)"`)

// unlisted are codes the source names that are neither returned nor
// recorded: worker.CodeShutdown is declared so that no handler reuses it,
// but a canceled attempt is handed back, never failed.
var unlisted = map[string]bool{"worker.shutdown": true}

// TestCatalogueListsEveryCode fails when a code written in the module's
// source (outside tests and nested modules) has no catalogue entry, so
// that docs/ERRORS.md cannot miss a code.
func TestCatalogueListsEveryCode(t *testing.T) {
	t.Parallel()
	listed := map[string]bool{}
	for _, e := range append(errs.Catalogue, errs.Recorded...) {
		listed[string(e.Code)] = true
	}
	root := filepath.Join("..", "..")
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path == root {
				return nil
			}
			name := d.Name()
			if strings.HasPrefix(name, ".") || name == "testdata" {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
				return filepath.SkipDir // another module (tools, the River comparison)
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range codeLiteral.FindAllStringSubmatch(string(src), -1) {
			if code := m[1]; !listed[code] && !unlisted[code] {
				t.Errorf("%s: code %s is in neither errs.Catalogue nor errs.Recorded", path, code)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestCatalogueEntries checks each entry: a code listed once, a known
// category, a meaning, and the same category as the Kind that returns it.
func TestCatalogueEntries(t *testing.T) {
	t.Parallel()
	known := map[runledger.Category]bool{
		runledger.CategoryValidation: true, runledger.CategoryConflict: true, runledger.CategoryNotFound: true,
		runledger.CategoryForbidden: true, runledger.CategoryTransient: true, runledger.CategoryInternal: true,
	}
	byCode := map[runledger.Code]runledger.Category{}
	for _, e := range errs.Catalogue {
		if _, dup := byCode[e.Code]; dup {
			t.Errorf("%s is listed twice", e.Code)
		}
		byCode[e.Code] = e.Category
		if !known[e.Category] {
			t.Errorf("%s: unknown category %q", e.Code, e.Category)
		}
		if strings.TrimSpace(e.Meaning) == "" {
			t.Errorf("%s has no meaning", e.Code)
		}
	}
	for _, e := range errs.Recorded {
		if _, dup := byCode[e.Code]; dup {
			t.Errorf("%s is listed twice", e.Code)
		}
		byCode[e.Code] = e.Category
		if e.Category != "" || strings.TrimSpace(e.Meaning) == "" {
			t.Errorf("recorded code %s: category %q (want none), meaning %q", e.Code, e.Category, e.Meaning)
		}
	}
	for _, k := range []errs.Kind{
		errs.JobNotFound, errs.DefinitionMissing, errs.DefinitionUnavailable, errs.IdempotencyConflict,
		errs.ReplayIdempotencyConflict, errs.LeaseMismatch, errs.NotCancelable, errs.ReplayUnsupportedIsolation,
		errs.EnqueueUnsupportedIsolation, errs.WorkflowManaged, errs.Transient, errs.Interrupted, errs.QueryFailed,
		errs.CommitUnconfirmed, errs.ReplaySourceUnstable, errs.InvariantViolated, errs.JobIDFailed, errs.ListLimitInvalid,
	} {
		if got, ok := byCode[k.Code]; !ok || got != k.Category {
			t.Errorf("kind %s has category %s, the catalogue lists %q", k.Code, k.Category, got)
		}
	}
}
