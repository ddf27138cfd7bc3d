package failpoint

import (
	"context"
	"testing"
)

func init() { Declare("test/a", "test/b", "test/c") }

func TestInjectRunsOnlyEnabledHooksUntilDisabled(t *testing.T) {
	var got []any
	Inject(context.Background(), "test/a", 1) // nothing enabled: no effect
	disableA := Enable("test/a", func(_ context.Context, arg any) { got = append(got, arg) })
	disableB := Enable("test/b", func(_ context.Context, arg any) { got = append(got, "b") })
	Inject(context.Background(), "test/a", 2)
	Inject(context.Background(), "test/c", 3)
	disableA()
	Inject(context.Background(), "test/a", 4)
	Inject(context.Background(), "test/b", 5)
	disableB()
	Inject(context.Background(), "test/b", 6)
	if len(got) != 2 || got[0] != 2 || got[1] != "b" {
		t.Fatalf("hooks saw %v, want [2 b]", got)
	}
}

func TestEnableAndDeclarePanicOnMisuse(t *testing.T) {
	for name, f := range map[string]func(){
		"enable undeclared": func() { Enable("test/undeclared", func(context.Context, any) {}) },
		"declare twice":     func() { Declare("test/a") },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: no panic", name)
				}
			}()
			f()
		}()
	}
}
