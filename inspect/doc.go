// Package inspect is the ledger's read model: Get reads a job, Events,
// NewestEvents and RecentEventsByType its history, List, ListAll and
// Search page through jobs, Locate finds a job's tenant, and GetDetail
// reads a job with a page of its events, its replay lineage and its
// requeue history in one snapshot.
//
// It is part of the library: it stands on the root package, the
// foundations in internal/ and the lineage reads of packages replay and
// requeue, and imports no tooling. Nothing it does writes.
//
// # Entry points
//
// Reads take a Querier, which a pool, a connection and a transaction all
// satisfy; a read on a transaction sees that transaction's writes.
// GetDetail takes a pool and opens a REPEATABLE READ, read-only
// transaction of its own, so its reads agree with each other.
//
// # Errors
//
// Every error is a *runledger.Error. Requests are validated before any
// database work, with category Validation and the job.* codes of the root
// package. A job outside the caller's scope is runledger.CodeJobNotFound,
// exactly as a job that does not exist.
//
// # Locks
//
// None: reads take no row locks.
package inspect

import (
	"github.com/runledger-go/runledger/db"
)

// Querier runs the statements of a read. *pgxpool.Pool, *pgx.Conn and
// pgx.Tx satisfy it; a read on a transaction sees that transaction's
// writes.
type Querier = db.DBTX

var queries = db.New()
