package bulk

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/internal/errs"
)

type testSource struct {
	id uuid.UUID
	ok bool
}

var errTestRefused = errs.Validation("test.refused", "Refused.")

var testAdapter = &Adapter[testSource, string, string]{
	Noun: "bulk test", Item: "source", Bound: "finished",
	Selection:    errs.Validation("test.selection", "Selection."),
	SourcesEmpty: errs.Validation("test.empty", "Empty."),
	Duplicate:    errs.Validation("test.duplicate", "Duplicate."),
	Range:        errs.Validation("test.range", "Range."),
	Limit:        errs.Validation("test.limit", "Limit."),
	Chunk:        errs.Validation("test.chunk", "Chunk."),
	Rate:         errs.Validation("test.rate", "Rate."),
	ID:           func(s testSource) uuid.UUID { return s.id },
	Check: func(s testSource) error {
		if !s.ok {
			return errTestRefused.New("refused")
		}
		return nil
	},
	Outcomes: []string{"wrote", "kept"},
	Outcome:  func(r string) string { return r },
	Wrote:    "wrote",
}

// TestAdapterValidatesWithTheOperationsCodes checks that each shared rule
// answers with the code the operation gave it, in the documented order.
func TestAdapterValidatesWithTheOperationsCodes(t *testing.T) {
	t.Parallel()
	a, b := testSource{uuid.New(), true}, testSource{uuid.New(), true}
	later := time.Now()
	earlier := later.Add(-time.Hour)
	cases := []struct {
		name string
		err  error
		code runledger.Code
	}{
		{"none", testAdapter.ValidateSelection(Selection[testSource]{}), "test.selection"},
		{"two", testAdapter.ValidateSelection(Selection[testSource]{Sources: []testSource{a}, Filter: true}), "test.selection"},
		{"empty", testAdapter.ValidateSelection(Selection[testSource]{Sources: []testSource{}}), "test.empty"},
		{"twice", testAdapter.ValidateSelection(Selection[testSource]{Sources: []testSource{a, b, a}}), "test.duplicate"},
		{"checked", testAdapter.ValidateSelection(Selection[testSource]{Sources: []testSource{a, {id: uuid.New()}}}), "test.refused"},
		{"stream chunk twice", testAdapter.checkChunk([]testSource{b, b}, 3), "test.duplicate"},
		{"stream chunk checked", testAdapter.checkChunk([]testSource{{id: uuid.New()}}, 0), "test.refused"},
		{"blank type", testAdapter.ValidateJobType(" "), "job.job_type_blank"},
		{"unclean type", testAdapter.ValidateJobType("a\x00"), "job.job_type_invalid"},
		{"long type", testAdapter.ValidateJobType(strings.Repeat("t", runledger.MaxJobTypeBytes+1)), "job.job_type_too_long"},
		{"range", testAdapter.ValidateWindow(&later, &earlier, 0), "test.range"},
		{"limit", testAdapter.ValidateWindow(&earlier, &later, -1), "test.limit"},
		{"chunk", testAdapter.ValidatePace(-1, 0), "test.chunk"},
		{"rate", testAdapter.ValidatePace(0, -1), "test.rate"},
	}
	for _, c := range cases {
		if !errors.Is(c.err, c.code) {
			t.Errorf("%s: got %v, want %s", c.name, c.err, c.code)
		}
	}
	for _, err := range []error{
		testAdapter.ValidateSelection(Selection[testSource]{Sources: []testSource{a, b}}),
		testAdapter.ValidateSelection(Selection[testSource]{Filter: true}),
		testAdapter.checkChunk([]testSource{a, b}, 0),
		testAdapter.ValidateJobType(strings.Repeat("t", runledger.MaxJobTypeBytes)),
		testAdapter.ValidateWindow(&earlier, &later, 0),
		testAdapter.ValidatePace(0, 0),
	} {
		if err != nil {
			t.Errorf("a valid part refused: %v", err)
		}
	}
}

// TestAdapterCountsByOutcome checks the outcome table and the count cap.
func TestAdapterCountsByOutcome(t *testing.T) {
	t.Parallel()
	tot := Totals{Selected: 3, Counts: []int{1, 2}}
	if testAdapter.Count(tot, "wrote") != 1 || testAdapter.Count(tot, "kept") != 2 || testAdapter.Index("other") != -1 {
		t.Fatalf("counts %v read as wrote %d, kept %d", tot.Counts, testAdapter.Count(tot, "wrote"), testAdapter.Count(tot, "kept"))
	}
	if MaxJobs(0) != math.MaxInt32 || MaxJobs(7) != 7 || MaxJobs(math.MaxInt32) != math.MaxInt32 {
		t.Fatal("MaxJobs caps wrongly")
	}
}
