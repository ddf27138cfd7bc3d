package inspect

import (
	"github.com/runledger-go/runledger/internal/errs"
)

// The request-validation errors of this package, all category Validation
// and returned before any database work. Their codes are stable; match one
// with errors.Is(err, runledger.Code("job.list_limit_invalid")).
var (
	errEventLimitInvalid = errs.Validation("job.event_limit_invalid",
		"Event limit must be between 1 and 1000.")
	errEventFilterInvalid = errs.Validation("job.event_filter_invalid",
		"Event type is not valid.")
	errListLimitInvalid  = errs.ListLimitInvalid
	errListFilterInvalid = errs.Validation("job.list_filter_invalid",
		"Job list filter is not supported.")
)
