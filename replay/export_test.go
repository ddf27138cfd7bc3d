package replay

// Names this package's tests use for its failpoints.
const (
	FailpointAfterLookup      = fpAfterLookup
	FailpointBeforeSourceLock = fpBeforeSourceLock
	FailpointAfterLockMiss    = fpAfterLockMiss
	FailpointAfterSourceLock  = fpAfterSourceLock
	FailpointBulkAfterSelect  = fpBulkAfterSelect
	FailpointBulkAfterLock    = fpBulkAfterLock
	FailpointBulkAfterChunk   = fpBulkAfterChunk
	BulkOperation             = bulkOperation
)

// BulkCall is what this package's bulk failpoint hooks receive.
type BulkCall = bulkCall

// FailpointCall is what this package's failpoint hooks receive.
type FailpointCall = failpointCall
