package replay

// Names this package's tests use for its failpoints.
const (
	FailpointAfterLookup      = fpAfterLookup
	FailpointBeforeSourceLock = fpBeforeSourceLock
	FailpointAfterLockMiss    = fpAfterLockMiss
	FailpointAfterSourceLock  = fpAfterSourceLock
)

// FailpointCall is what this package's failpoint hooks receive.
type FailpointCall = failpointCall
