package inspect_test

import (
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/inspect"
	"github.com/runledger-go/runledger/internal/testdb"
)

func TestValidationFailsBeforeAnyDatabaseWork(t *testing.T) {
	t.Parallel()
	ctx := testdb.Context(t)
	pool := testdb.ClosedPool(t)
	cases := []struct {
		name string
		call func() error
		want runledger.Code
	}{
		{"newest events limit", func() error {
			_, err := inspect.NewestEvents(ctx, pool, runledger.Global(), uuid.New(), 0)
			return err
		}, "job.event_limit_invalid"},
		{"recent events limit", func() error {
			_, err := inspect.RecentEventsByType(ctx, pool, runledger.JobEventLeased, time.Now(), 1001)
			return err
		}, "job.event_limit_invalid"},
		{"recent events type", func() error {
			_, err := inspect.RecentEventsByType(ctx, pool, "leased", time.Now(), 10)
			return err
		}, "job.event_filter_invalid"},
		{"list limit", func() error { _, err := inspect.List(ctx, pool, inspect.ListRequest{Limit: 0}); return err }, "job.list_limit_invalid"},
		{"list status unknown", func() error {
			_, err := inspect.List(ctx, pool, inspect.ListRequest{Limit: 1, Status: testdb.Ptr(runledger.JobStatus("DONE"))})
			return err
		}, "job.list_filter_invalid"},
		{"list status with cursor", func() error {
			_, err := inspect.List(ctx, pool, inspect.ListRequest{Limit: 1, Status: testdb.Ptr(runledger.JobStatusPending), Before: &inspect.Cursor{}})
			return err
		}, "job.list_filter_invalid"},
		{"list all limit", func() error { _, err := inspect.ListAll(ctx, pool, inspect.ListAllRequest{Limit: 1001}); return err }, "job.list_limit_invalid"},
		{"list all type without status", func() error {
			_, err := inspect.ListAll(ctx, pool, inspect.ListAllRequest{Limit: 1, JobType: "email"})
			return err
		}, "job.list_filter_invalid"},
		{"list all status without type", func() error {
			_, err := inspect.ListAll(ctx, pool, inspect.ListAllRequest{Limit: 1, Status: testdb.Ptr(runledger.JobStatusPending)})
			return err
		}, "job.list_filter_invalid"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.call()
			testdb.WantCode(t, err, c.want)
			if runledger.CategoryOf(err) != runledger.CategoryValidation {
				t.Fatalf("category = %s, want validation", runledger.CategoryOf(err))
			}
		})
	}

	// The pool really cannot reach a database: a valid request fails
	// otherwise than by validation.
	_, err := inspect.List(ctx, pool, inspect.ListRequest{Limit: 1})
	if err == nil || runledger.CategoryOf(err) == runledger.CategoryValidation {
		t.Fatalf("valid list on the dead pool = %v, want a database failure", err)
	}
}
