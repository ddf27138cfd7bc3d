// Package pgbench holds the pgbench scripts that `runledger bench
// --compare-pgbench` runs beside the Go replay, doing the same work from a
// C client: for each path (inserted, existing, mismatch, not_found) a
// reference_*.sql script, the reference protocol with one statement per
// round trip, and a pipelined_*.sql script, this project's statements in
// its round trips (\startpipeline ... \endpipeline).
//
// The pipelined scripts are generated from the statements in db/ (go test
// ./internal/bench -run TestPgbenchScripts -update); a test fails when they
// drift. The reference scripts are written by hand after the reference
// implementation (shared spec, reference-replay.md sections 3, 6 and 7).
//
// Every script expects the variables sources (how many sources were
// seeded), org (their organization), reason and seed (the key and reason
// of the seeded lineage), given with pgbench -D, and the helper functions
// runledger_bench_id(n) (the id of seeded source n, or of a missing job
// past the seeded range) and runledger_bench_new_id() (a time-ordered id,
// like the UUIDv7 the Go client generates), which the bench seeding
// creates. Run them with -M prepared, as pgx runs prepared statements.
package pgbench

import "embed"

// Scripts holds the *.sql scripts.
//
//go:embed *.sql
var Scripts embed.FS
