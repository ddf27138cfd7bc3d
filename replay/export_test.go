package replay

import (
	"context"

	"github.com/google/uuid"
)

// SetTestHooks installs the lock-loop hooks for one test and returns a
// function that removes them. Tests using it must not run in parallel.
func SetTestHooks(beforeSourceLock, afterLockMiss func(ctx context.Context, source uuid.UUID, attempt int)) (restore func()) {
	testHooks.beforeSourceLock = beforeSourceLock
	testHooks.afterLockMiss = afterLockMiss
	return func() {
		testHooks.beforeSourceLock = nil
		testHooks.afterLockMiss = nil
	}
}
