package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// TestErrorsPageIsCurrent fails when docs/ERRORS.md is not what the
// generator writes from the catalogue.
func TestErrorsPageIsCurrent(t *testing.T) {
	t.Parallel()
	var want bytes.Buffer
	if err := render(&want); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join("..", "..", "..", "docs", "ERRORS.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want.Bytes()) {
		t.Fatal("docs/ERRORS.md differs from the error catalogue; run go generate ./internal/errs and commit the page")
	}
}
