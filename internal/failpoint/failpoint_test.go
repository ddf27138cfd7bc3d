package failpoint

import (
	"context"
	"testing"
)

func TestInjectRunsOnlyEnabledHooksUntilDisabled(t *testing.T) {
	var got []any
	Inject(context.Background(), "a", 1) // nothing registered: no effect
	disableA := Enable("a", func(_ context.Context, arg any) { got = append(got, arg) })
	disableB := Enable("b", func(_ context.Context, arg any) { got = append(got, "b") })
	Inject(context.Background(), "a", 2)
	Inject(context.Background(), "c", 3)
	disableA()
	Inject(context.Background(), "a", 4)
	Inject(context.Background(), "b", 5)
	disableB()
	Inject(context.Background(), "b", 6)
	if len(got) != 2 || got[0] != 2 || got[1] != "b" {
		t.Fatalf("hooks saw %v, want [2 b]", got)
	}
}
