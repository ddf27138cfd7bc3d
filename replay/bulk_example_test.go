package replay_test

import (
	"context"
	"fmt"
	"log"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/replay"
)

// ExampleBulk replays every succeeded job of a type in one tenant, in
// chunks, after counting what the filter selects; the same key and
// reason again (after a crash, say) replays nothing twice.
func ExampleBulk() {
	ctx := context.Background()
	pool, source := exampleSetup(ctx) // a pool and a job of type "email" that SUCCEEDED
	defer pool.Close()

	req := replay.BulkRequest{
		Scope:     runledger.ScopeOf(source.OrganizationID),
		Key:       "incident-42-resend",
		Reason:    "emails lost downstream during incident 42",
		Operator:  "alice@example.com", // recorded in the audit
		Filter:    &replay.Filter{JobType: source.JobType},
		ChunkSize: 500,
	}
	n, err := replay.BulkCount(ctx, pool, req)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("selected:", n)
	for range 2 {
		sum, err := replay.Bulk(ctx, pool, req, func(c replay.BulkChunk) error {
			return nil // c.Total is the running summary: report progress here
		})
		if err != nil {
			log.Fatal(err) // resumable: the same request again skips what is done
		}
		fmt.Printf("inserted %d, existing %d, refused %d\n", sum.Inserted, sum.Existing, sum.Refused())
	}
	// Output:
	// selected: 1
	// inserted 1, existing 0, refused 0
	// inserted 0, existing 1, refused 0
}
