// Package reliability holds no code of its own: its tests prove, against a
// real PostgreSQL server, what the replay, jobs and worker packages promise
// when things go wrong. docs/RELIABILITY.md lists every fault with the test that
// proves it; in short:
//
//   - Killed connections. The backend of a replay (both entry points), a
//     keyed enqueue and a completion is terminated with
//     pg_terminate_backend at every step of its transaction (after BEGIN,
//     after the lineage lookup, while waiting for and after taking the
//     source lock, after the insert, just before COMMIT, and while COMMIT
//     itself waits on a deferred constraint trigger), at exactly that point:
//     the library's named failpoints (internal/failpoint) or a lock the test
//     holds make it deterministic. A TCP proxy that swallows the server's
//     reply to COMMIT covers the remaining case, a commit that landed but
//     whose acknowledgement was lost. Each time: the caller gets a
//     classified error (transient, or commit-unconfirmed at COMMIT), the
//     database holds all of the operation or none of it, and retrying the
//     same request converges to exactly one replay, job or completion.
//   - Server restarts under load. Sixteen clients replay two hundred
//     sources while a dedicated durable server is stopped in fast and then
//     immediate mode and started again: afterwards there is exactly one
//     replay per request key, every replay has its lineage row and its one
//     ENQUEUED event, and the sources are unchanged.
//   - The worker runtime. A worker process (the test binary started
//     again as a worker child) is killed with SIGKILL mid-job, paused with
//     SIGSTOP past its lease, and stopped with SIGTERM; a worker's network
//     is black-holed while its handler runs; a completion's reply is lost
//     while the network stays down; a dedicated durable server is
//     restarted twice under a steady stream of jobs. Handlers record a
//     side effect per attempt. Each time every job ends terminal (or is
//     handed back unstarted, at its attempt), none stays LEASED, no attempt
//     is finished or run twice, and a worker that lost its lease writes
//     nothing more for the attempt.
//   - Flow control and schedules across server restarts. A paused job
//     type stays paused through a fast and an immediate restart (its jobs
//     PENDING, untouched) while other types run; resumed, its jobs run in
//     claim order. A schedule due every second, fired by two workers,
//     fires each tick at most once across an immediate restart and a
//     downtime of several ticks, of which the latest policy fires one.
//   - Storms. Sixty-four concurrent requests on one key with two reasons
//     resolve to one lineage row, consistently reported to every caller;
//     sixty-four replays racing workers that claim and complete them
//     neither deadlock nor lose an event.
//   - Tenant isolation. Every scoped read and write, in every pair of
//     scopes, treats a job of another scope exactly as a missing id (same
//     outcome, code, category and message) and locks and changes nothing
//     of it.
//   - Waiting. A replay blocked on a lock honours its context deadline,
//     lock_timeout and statement_timeout: a transient error, a rolled-back
//     transaction that leaves no lock, nothing written, and a retry that
//     succeeds.
//
// The fuzz target here, FuzzEnqueueRequestValidate, checks jobs request
// validation; FuzzRequestValidate (package replay) and the decoders'
// targets (internal/rows) live beside the code they exercise.
//
// The server-restart, storm and worker-process tests are skipped under
// -short (make test-short); go test ./... and CI run everything.
//
// It is tooling: its tests stand on the library, the worker runtime, the
// test kit (internal/testdb, with pgproxy for faults on the wire) and the
// library's failpoints, and nothing imports it.
package reliability
