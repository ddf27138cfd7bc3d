package runledger_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/inspect"
	"github.com/runledger-go/runledger/internal/testdb"
	"github.com/runledger-go/runledger/jobs"
)

func TestCodeMatchesWithErrorsIs(t *testing.T) {
	t.Parallel()
	err := fmt.Errorf("wrapped: %w", &runledger.Error{Code: runledger.CodeJobNotFound, Category: runledger.CategoryNotFound})
	if !errors.Is(err, runledger.CodeJobNotFound) {
		t.Fatal("errors.Is(err, CodeJobNotFound) = false")
	}
	if errors.Is(err, runledger.CodeLeaseMismatch) || errors.Is(err, runledger.ErrCommitUnconfirmed) {
		t.Fatal("an error matched another code")
	}
	if !errors.Is(&runledger.Error{Code: "job.payload_invalid"}, runledger.Code("job.payload_invalid")) {
		t.Fatal("an unnamed code does not match by its spelling")
	}
	if runledger.CodeJobNotFound.Error() != "job.not_found" {
		t.Fatalf("Code.Error() = %q", runledger.CodeJobNotFound.Error())
	}
	if got := runledger.CodeOf(err); got != runledger.CodeJobNotFound {
		t.Fatalf("CodeOf = %q", got)
	}
	var nilErr *runledger.Error
	if nilErr.Is(runledger.CodeJobNotFound) {
		t.Fatal("a nil *Error matched a code")
	}
}

func TestErrorTextCarriesDetailAndCause(t *testing.T) {
	t.Parallel()
	cause := errors.New("connection reset by peer")
	e := &runledger.Error{Code: runledger.CodeTransient, Category: runledger.CategoryTransient,
		Message: "Database operation could not complete; retry.", Detail: "claim jobs", Err: cause}
	want := "Database operation could not complete; retry. (db.transient): claim jobs: connection reset by peer"
	if got := fmt.Sprint(e); got != want {
		t.Fatalf("Sprint = %q, want %q", got, want)
	}
	// A detail that already quotes the cause does not repeat it.
	e.Detail = "claim jobs: connection reset by peer"
	if got := e.Error(); got != want {
		t.Fatalf("Error() = %q, want %q", got, want)
	}
	if got := (&runledger.Error{Code: "c", Message: "m"}).Error(); got != "m (c)" {
		t.Fatalf("Error() without detail = %q", got)
	}
	if !errors.Is(e, cause) {
		t.Fatal("the cause is not reachable")
	}
	var nilErr *runledger.Error
	if nilErr.Error() != "<nil>" {
		t.Fatalf("nil Error() = %q", nilErr.Error())
	}
}

func TestErrorLogValue(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&buf, nil))
	e := &runledger.Error{Code: runledger.CodeUniqueViolation, Category: runledger.CategoryConflict,
		Message: "Resource already exists.", Detail: "insert job", SQLState: "23505",
		Constraint: "uq_x", Err: context.Canceled}
	log.Info("failed", "err", e)
	var rec struct {
		Err map[string]string `json:"err"`
	}
	if err := json.Unmarshal(buf.Bytes(), &rec); err != nil {
		t.Fatalf("%v: %s", err, buf.String())
	}
	want := map[string]string{"code": "db.unique_violation", "category": "conflict", "message": "Resource already exists.",
		"detail": "insert job", "sqlstate": "23505", "constraint": "uq_x", "cause": "context canceled"}
	for k, v := range want {
		if rec.Err[k] != v {
			t.Errorf("log %s = %q, want %q (%s)", k, rec.Err[k], v, strings.TrimSpace(buf.String()))
		}
	}
	// Empty fields are left out.
	buf.Reset()
	log.Info("failed", "err", &runledger.Error{Code: "c", Category: runledger.CategoryInternal, Message: "m"})
	if strings.Contains(buf.String(), "sqlstate") || strings.Contains(buf.String(), "cause") {
		t.Fatalf("empty fields logged: %s", buf.String())
	}
}

func TestCategoryOf(t *testing.T) {
	t.Parallel()
	if runledger.CategoryOf(nil) != "" || runledger.CategoryOf(errors.New("x")) != runledger.CategoryInternal {
		t.Fatal("CategoryOf of nil or a foreign error")
	}
	if !runledger.IsTransient(&runledger.Error{Category: runledger.CategoryTransient}) {
		t.Fatal("IsTransient")
	}
}

// TestLibraryErrorsPrintTheirDetail checks errors as the library returns
// them, not built by hand: %v holds the message, the code, the detail and
// the cause, so a log line that prints err loses nothing.
func TestLibraryErrorsPrintTheirDetail(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.ClosedPool(t)
	_, validation := jobs.Enqueue(ctx, pool, jobs.EnqueueRequest{JobType: " "})
	_, database := inspect.Get(ctx, pool, runledger.Global(), uuid.New())
	for _, err := range []error{validation, database} {
		var e *runledger.Error
		if !errors.As(err, &e) || e.Detail == "" {
			t.Fatalf("err = %v (%T), want a *runledger.Error with a detail", err, err)
		}
		text := fmt.Sprint(err)
		for _, part := range []string{e.Message, string(e.Code), e.Detail} {
			if !strings.Contains(text, part) {
				t.Errorf("fmt.Sprint(err) = %q, missing %q", text, part)
			}
		}
		if e.Err != nil && !strings.Contains(text, e.Err.Error()) {
			t.Errorf("fmt.Sprint(err) = %q, missing the cause %q", text, e.Err)
		}
	}
	if runledger.CodeOf(database) == runledger.CodeOf(validation) {
		t.Fatalf("both errors have code %s; want a validation and a database failure", runledger.CodeOf(database))
	}
}
