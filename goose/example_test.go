package goose_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"

	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" database/sql driver

	"github.com/runledger-go/runledger/goose"
	"github.com/runledger-go/runledger/internal/testdb"
)

// Example migrates a database to the current schema at start-up, as an
// application does before it enqueues or runs jobs. Running it again (a
// second process, the next deploy) applies nothing; two processes
// migrating at once take turns.
func Example() {
	ctx := context.Background()
	url := exampleEmptyURL() // in an application: your database URL

	db, err := sql.Open("pgx", url)
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()

	for i := 0; i < 2; i++ {
		applied, err := goose.UpResults(ctx, db)
		if err != nil {
			log.Fatal(err) // the failing migration rolled back; the ones before it stay
		}
		if len(applied) == 0 {
			fmt.Println("nothing pending")
		} else {
			fmt.Println("migrated")
		}
	}

	current, latest, err := goose.Version(ctx, db)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("at the newest version:", current == latest)
	// Output:
	// migrated
	// nothing pending
	// at the newest version: true
}

// exampleEmptyURL gives the example a fresh database without the schema.
func exampleEmptyURL() string {
	url, err := testdb.NewEmptyURLForExample()
	if err != nil {
		log.Fatal(err)
	}
	return url
}
