package requeue

import (
	"github.com/google/uuid"

	"github.com/runledger-go/runledger/internal/failpoint"
)

// Failpoints of this package (see internal/failpoint), each fired with a
// failpointCall; the owned transaction also fires internal/txn's. An
// attempt's statements share one round trip; while a test enables one of
// these points the batch is split there (txn.Batch.PointIf), so the hook
// runs between two statements, only when its condition holds.
const (
	// fpAfterLockMiss: an attempt's requeue statement found nothing to
	// requeue (and classified the miss); the next attempt, or the
	// verdict, is next.
	fpAfterLockMiss = "requeue/after-lock-miss"
	// fpAfterRequeue: the job is requeued and its event written; in Job
	// COMMIT is next (then txn's before-commit point).
	fpAfterRequeue = "requeue/after-requeue"
	// fpBulkAfterRequeue: a bulk chunk's first round trip is in: the
	// requeueable jobs are locked and requeued, nothing is committed; the
	// classification read of the others and COMMIT are next (fired with
	// the engine's bulk.FailpointCall, labelled with the reason).
	fpBulkAfterRequeue = "requeue/bulk-after-requeue"
)

func init() {
	failpoint.Declare(fpAfterLockMiss, fpAfterRequeue, fpBulkAfterRequeue)
}

// failpointCall identifies a requeue request at a failpoint. Attempt is
// the lock loop's attempt, from 1.
type failpointCall struct {
	JobID   uuid.UUID
	Attempt int
}
