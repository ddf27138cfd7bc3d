package schedules_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/internal/testdb"
	"github.com/runledger-go/runledger/jobs"
	"github.com/runledger-go/runledger/schedules"
)

// Example declares a schedule at start-up and lists the tenant's
// schedules. Upsert is idempotent: every process of an application may
// declare the same schedules each time it starts, and only a real change
// writes.
func Example() {
	ctx := context.Background()
	pool := exampleDB(ctx) // a migrated database with job type "report" defined
	defer pool.Close()

	req := schedules.UpsertRequest{
		Scope:   runledger.Global(),
		Name:    "nightly-report",
		Cron:    "0 3 * * *", // 03:00 every day
		TZ:      "Europe/Berlin",
		JobType: "report",
		Payload: json.RawMessage(`{"format":"pdf"}`),
	}
	for i := 0; i < 2; i++ {
		res, err := schedules.Upsert(ctx, pool, req)
		if err != nil {
			log.Fatal(err) // e.g. schedule.cron_invalid; req.Validate() finds it without a database
		}
		fmt.Println(res.Schedule.Name, res.Disposition)
	}

	list, err := schedules.List(ctx, pool, runledger.Global(), 100)
	if err != nil {
		log.Fatal(err)
	}
	for _, s := range list {
		fmt.Printf("%s: %q in %s, %s, missed ticks: %s\n", s.Name, s.Cron, s.TZ, s.JobType, s.Missed)
	}
	// Output:
	// nightly-report inserted
	// nightly-report unchanged
	// nightly-report: "0 3 * * *" in Europe/Berlin, report, missed ticks: latest
}

// ExampleFireDue fires the schedules that are due, as a worker does in a
// loop. Any number of processes may call it at once: each tick fires one
// job, whoever gets there first.
func ExampleFireDue() {
	ctx := context.Background()
	pool := exampleDB(ctx)
	defer pool.Close()

	if _, err := schedules.Upsert(ctx, pool, schedules.UpsertRequest{
		Scope: runledger.Global(), Name: "every-5-minutes", Cron: "*/5 * * * *", JobType: "report",
	}); err != nil {
		log.Fatal(err)
	}
	exampleTimePasses(ctx, pool) // the schedule's next tick is now in the past

	for i := 0; i < 2; i++ {
		res, err := schedules.FireDue(ctx, pool, schedules.FireRequest{Limit: 100})
		if err != nil {
			log.Fatal(err) // runledger.ErrCommitUnconfirmed: calling again is safe
		}
		for _, f := range res.Fired {
			fmt.Println("fired", f.Schedule, f.Disposition)
		}
		for _, b := range res.Blocked {
			fmt.Println("blocked", b.Schedule, b.Err)
		}
		fmt.Println(len(res.Fired), "fired this round")
	}
	// Output:
	// fired every-5-minutes inserted
	// 1 fired this round
	// 0 fired this round
}

// ExampleUpsertTx declares a schedule inside the caller's transaction,
// together with the caller's own writes: both commit or neither does.
func ExampleUpsertTx() {
	ctx := context.Background()
	pool := exampleDB(ctx)
	defer pool.Close()

	tx, err := pool.Begin(ctx) // READ COMMITTED, PostgreSQL's default
	if err != nil {
		log.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // a no-op after Commit

	res, err := schedules.UpsertTx(ctx, tx, schedules.UpsertRequest{
		Scope: runledger.Global(), Name: "weekly-digest", Cron: "0 8 * * MON", JobType: "report",
	})
	if err != nil {
		log.Fatal(err) // the deferred rollback undoes everything
	}
	// ... the application's own writes in tx, e.g. the settings row that
	// turned the digest on ...
	if err := tx.Commit(ctx); err != nil {
		log.Fatal(err)
	}
	s, err := schedules.Get(ctx, pool, runledger.Global(), "weekly-digest")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(res.Disposition, s.Name, s.Active)
	// Output: inserted weekly-digest true
}

// exampleDB gives the examples a fresh migrated database with job type
// "report" defined (in an application: pgxpool.New with your database
// URL; the definition comes from jobs.UpsertDefinition at start-up).
func exampleDB(ctx context.Context) *pgxpool.Pool {
	url, err := testdb.NewURLForExample()
	if err != nil {
		log.Fatal(err)
	}
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := jobs.UpsertDefinition(ctx, pool, jobs.DefinitionInput{JobType: "report"}); err != nil {
		log.Fatal(err)
	}
	return pool
}

// exampleTimePasses stands in for waiting for a tick: it moves every
// schedule's cursor back to the top of the current hour, a tick of any
// schedule that fires on whole minutes, so the schedules are due now.
func exampleTimePasses(ctx context.Context, pool *pgxpool.Pool) {
	if _, err := pool.Exec(ctx, `UPDATE job_schedules SET next_fire_at = date_trunc('hour', now())`); err != nil {
		log.Fatal(err)
	}
}

// ExampleUpsertRequest_Validate checks a schedule from configuration
// before any database is at hand, as a program does when it starts.
func ExampleUpsertRequest_Validate() {
	for _, cron := range []string{"*/15 * * * *", "@hourly", "0 25 * * *"} {
		req := schedules.UpsertRequest{Scope: runledger.Global(), Name: "sync", Cron: cron, JobType: "report"}
		err := req.Validate()
		fmt.Printf("%-14q valid: %t, cron refused: %t\n", cron, err == nil, errors.Is(err, schedules.CodeCronInvalid))
	}
	// Output:
	// "*/15 * * * *" valid: true, cron refused: false
	// "@hourly"      valid: false, cron refused: true
	// "0 25 * * *"   valid: false, cron refused: true
}
