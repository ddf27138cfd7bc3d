package bulk

import (
	"context"
	"testing"
	"time"
)

// TestBucketRefillsFromTheLastTake checks the throttle's arithmetic on a
// clock of its own: full at the start, empty after a full take, refilled
// at the rate from the take (not from the start), never above capacity.
func TestBucketRefillsFromTheLastTake(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	b := newBucket(20, 20, t0)
	if d := b.delay(20, t0); d != 0 {
		t.Fatalf("a full bucket delays %s", d)
	}
	// An hour without a take: still one bucket's worth, no more.
	later := t0.Add(time.Hour)
	b.refill(later)
	if b.tokens != 20 {
		t.Fatalf("%v tokens after an idle hour, want the capacity 20", b.tokens)
	}
	b.tokens, b.at = 0, later // 20 taken at later
	if d := b.delay(20, later); d < time.Second || d > time.Second+time.Microsecond {
		t.Fatalf("empty bucket: %s until 20 tokens, want 1s", d)
	}
	if d := b.delay(5, later.Add(100*time.Millisecond)); d < 150*time.Millisecond || d > 150*time.Millisecond+time.Microsecond {
		t.Fatalf("2 tokens after 100ms: %s until 5, want 150ms", d)
	}
	var none *bucket
	if err := none.wait(context.Background(), nil, 1000); err != nil {
		t.Fatal(err)
	}
	none.take(5)
}
