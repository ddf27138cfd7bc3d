package requeue

import "github.com/runledger-go/runledger/internal/bulk"

// Names this package's tests use for its failpoints.
const (
	FailpointAfterLockMiss    = fpAfterLockMiss
	FailpointAfterRequeue     = fpAfterRequeue
	FailpointBulkAfterRequeue = fpBulkAfterRequeue
	FailpointBulkAfterChunk   = bulk.FailpointAfterChunk
	FailpointBulkAfterSelect  = bulk.FailpointAfterSelect
)

// FailpointCall is what this package's failpoint hooks receive.
type FailpointCall = failpointCall

// BulkCall is what the bulk failpoint hooks receive (Label is the reason).
type BulkCall = bulk.FailpointCall
