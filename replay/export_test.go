package replay

import "github.com/runledger-go/runledger/internal/bulk"

// Names this package's tests use for its failpoints.
const (
	FailpointAfterLookup         = fpAfterLookup
	FailpointBeforeSourceLock    = fpBeforeSourceLock
	FailpointAfterLockMiss       = fpAfterLockMiss
	FailpointAfterClassification = fpAfterClassification
	FailpointAfterSourceLock     = fpAfterSourceLock
	FailpointBulkAfterSelect     = bulk.FailpointAfterSelect
	FailpointBulkAfterLock       = fpBulkAfterLock
	FailpointBulkAfterChunk      = bulk.FailpointAfterChunk
	BulkOperation                = bulkOperation
)

// BulkCall is what the bulk failpoint hooks receive (Label is the key).
type BulkCall = bulk.FailpointCall

// FailpointCall is what this package's failpoint hooks receive.
type FailpointCall = failpointCall
