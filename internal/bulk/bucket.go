package bulk

import (
	"context"
	"time"
)

// bucket is the throttle: a token bucket of capacity tokens refilled at
// rate tokens per second, full at the start. A nil bucket never waits.
type bucket struct {
	rate     float64 // tokens per second
	capacity float64
	tokens   float64   // as of at
	at       time.Time // when tokens was last brought up to date
}

func newBucket(rate, capacity int, now time.Time) *bucket {
	return &bucket{rate: float64(rate), capacity: float64(capacity), tokens: float64(capacity), at: now}
}

// refill brings the bucket up to now.
func (b *bucket) refill(now time.Time) {
	if d := now.Sub(b.at); d > 0 {
		b.tokens = min(b.capacity, b.tokens+d.Seconds()*b.rate)
		b.at = now
	}
}

// delay is how long after now the bucket holds n tokens (n is at most
// the capacity).
func (b *bucket) delay(n int, now time.Time) time.Duration {
	b.refill(now)
	missing := float64(n) - b.tokens
	if missing <= 0 {
		return 0
	}
	// Round up, so that the wait never ends a fraction of a token short.
	return time.Duration(missing/b.rate*float64(time.Second)) + time.Nanosecond
}

// wait blocks until the bucket holds n tokens, ctx ends (its error is
// returned) or stop is closed (ErrStopped).
func (b *bucket) wait(ctx context.Context, stop <-chan struct{}, n int) error {
	if b == nil {
		return nil
	}
	for {
		d := b.delay(n, time.Now())
		if d <= 0 {
			return nil
		}
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-stop:
			t.Stop()
			return ErrStopped
		case <-t.C:
		}
	}
}

// take removes n tokens now: what was just written. The bucket may go
// below zero only if more was written than waited for, which the engine
// never does.
func (b *bucket) take(n int) {
	if b == nil || n == 0 {
		return
	}
	b.refill(time.Now())
	b.tokens -= float64(n)
}
