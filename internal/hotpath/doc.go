// Package hotpath measures what the hot path (enqueue, claim, complete)
// costs the server per job, by the method of the storage decision
// (CONTRACT 2a): backend CPU, WAL bytes and index entries (TestHotPathCost),
// and what the storage migrations cost on a large history
// (TestMigrationCost). It has only tests, run on request:
//
//	RUNLEDGER_HOTPATH=1 go test ./internal/hotpath -run TestHotPathCost -v
//	RUNLEDGER_HOTPATH=1 go test ./internal/hotpath -run TestMigrationCost -v
//
// The figures are logged, never asserted: they depend on the machine. The
// server is the one testdb starts (fsync, synchronous_commit and
// full_page_writes off), so the WAL holds no full-page images.
package hotpath
