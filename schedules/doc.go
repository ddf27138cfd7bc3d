// Package schedules runs periodic jobs: a named schedule (unique per
// tenant) enqueues a job of its type at each tick of a cron expression,
// computed in the schedule's time zone.
//
// It is a package of its own, above jobs, because a schedule is a row of
// its own (job_schedules) with its own life cycle (upsert, pause, resume,
// delete), and firing is a client of jobs.EnqueueTx: a fire is a keyed
// enqueue, "schedule:NAME:TICK" with TICK in RFC 3339 UTC, so a tick
// makes at most one job whatever the number of firers, restarts or clock
// skew between the machines. The worker runtime calls FireDue at its poll
// interval; nothing elects a leader.
//
// The operations of several statements come in the pair X (own READ
// COMMITTED transaction) and XTx (inside the caller's transaction, never
// committed or rolled back here): Upsert, Pause, Resume, FireDue. The
// single statements (Get, List, Delete) take a jobs.Querier: a pool or a
// transaction. Every operation is scoped to one tenant, except FireDue,
// which serves every tenant (on Citus tenant by tenant).
package schedules
