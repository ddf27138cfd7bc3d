package testdb

import (
	"errors"
	"fmt"
	"testing"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/replay"
)

// MustReplayed returns a function that fails the test unless its arguments
// are a Replayed outcome and no error, so that a call's two results can be
// checked in place: testdb.MustReplayed(t)(replay.SucceededJob(...)).
func MustReplayed(t testing.TB) func(replay.Outcome, error) replay.Replayed {
	return func(out replay.Outcome, err error) replay.Replayed {
		t.Helper()
		if err != nil {
			t.Fatalf("replay: %v (%s)", err, Detail(err))
		}
		r, ok := out.(replay.Replayed)
		if !ok {
			t.Fatalf("outcome %T %+v, want Replayed", out, out)
		}
		return r
	}
}

// Detail describes err for a failure message: a library error's code,
// category, SQLSTATE and detail, or any other error's type and text.
func Detail(err error) string {
	var e *runledger.Error
	if errors.As(err, &e) {
		return fmt.Sprintf("%s/%s sqlstate=%q: %s", e.Code, e.Category, e.SQLState, e.Detail)
	}
	return fmt.Sprintf("%T %v", err, err)
}
