package runledger_test

import (
	"errors"
	"fmt"

	"github.com/google/uuid"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/schedules"
)

// ExampleCode branches on a library error by its stable code and its
// category. Every entry point returns errors that carry both; here a
// scope naming the nil organization is refused before any database is
// touched.
func ExampleCode() {
	err := schedules.ValidateRef(runledger.Organization(uuid.Nil), "nightly-report")
	switch {
	case errors.Is(err, runledger.CodeOrganizationInvalid):
		fmt.Println("refused:", runledger.CodeOf(err), runledger.CategoryOf(err))
	case runledger.IsTransient(err):
		fmt.Println("retry the same request")
	case err != nil:
		fmt.Println("failed:", err)
	}
	// Output: refused: job.organization_invalid validation
}

// ExampleScope names whose jobs a call may see and change: every call
// takes the scope the caller has authorized, and a job of another scope
// is treated exactly as a missing one.
func ExampleScope() {
	org := uuid.MustParse("0193a4f2-8c1e-7d3a-9b2f-4e5d6c7b8a90")
	for _, s := range []runledger.Scope{runledger.Global(), runledger.Organization(org), runledger.ScopeOf(nil)} {
		fmt.Println(s, s.IsGlobal())
	}
	// Output:
	// global true
	// organization:0193a4f2-8c1e-7d3a-9b2f-4e5d6c7b8a90 false
	// global true
}
