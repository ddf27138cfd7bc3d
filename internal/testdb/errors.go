package testdb

import (
	"errors"
	"testing"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/internal/errs"
)

// WantCode fails the test unless err is a *runledger.Error with code and
// the category that code is published with in the error catalogue, and
// returns it.
func WantCode(t testing.TB, err error, code runledger.Code) *runledger.Error {
	t.Helper()
	var e *runledger.Error
	if !errors.As(err, &e) {
		t.Fatalf("err = %v (%T), want a *runledger.Error with code %s", err, err, code)
	}
	if !errors.Is(err, code) {
		t.Fatalf("err = %v (%s), want %s", err, Detail(err), code)
	}
	want, ok := codeCategories[code]
	if !ok {
		t.Fatalf("code %s is not in the error catalogue (internal/errs)", code)
	}
	if e.Category != want || runledger.CategoryOf(err) != want {
		t.Fatalf("category of %s = %s, want %s", code, e.Category, want)
	}
	return e
}

// WantTransient fails unless err is a *runledger.Error of category
// transient.
func WantTransient(t testing.TB, err error) *runledger.Error {
	t.Helper()
	var e *runledger.Error
	if !errors.As(err, &e) || e.Category != runledger.CategoryTransient || !runledger.IsTransient(err) {
		t.Fatalf("error %v (%s), want category transient", err, Detail(err))
	}
	if errors.Is(err, runledger.ErrCommitUnconfirmed) {
		t.Fatalf("error %v is both transient and commit-unconfirmed", err)
	}
	return e
}

// WantCommitUnconfirmed fails unless err matches runledger.ErrCommitUnconfirmed.
func WantCommitUnconfirmed(t testing.TB, err error) {
	t.Helper()
	if !errors.Is(err, runledger.ErrCommitUnconfirmed) || runledger.CodeOf(err) != runledger.ErrCommitUnconfirmed {
		t.Fatalf("error %v (%s), want db.transaction_commit_unconfirmed", err, Detail(err))
	}
	if runledger.IsTransient(err) {
		t.Fatalf("commit-unconfirmed error %v is also transient", err)
	}
}

// codeCategories are the published categories of every code, from the
// catalogue docs/ERRORS.md is generated from: the category is part of each
// code's contract.
var codeCategories = func() map[runledger.Code]runledger.Category {
	m := make(map[runledger.Code]runledger.Category, len(errs.Catalogue))
	for _, e := range errs.Catalogue {
		m[e.Code] = e.Category
	}
	return m
}()
