// Package failpoint lets tests act at named points inside an operation (kill
// a connection between two statements, change a row between a locking read
// and the read that follows it).
//
// The package that owns an operation declares its points (Declare, from an
// init function) and fires them (Inject); tests enable hooks by name.
// Enabling a name that no package declared panics, so a test cannot wait
// for a point that was renamed away. Outside tests no hook is enabled and
// Inject costs one atomic load.
package failpoint

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
)

// Hook runs at a failpoint with the operation's context and the value the
// declaring package passes to identify the call.
type Hook func(ctx context.Context, arg any)

var (
	mu       sync.Mutex
	declared = map[string]bool{}
	active   atomic.Pointer[map[string]Hook]
)

// Declare registers failpoint names. Names are process-wide, so a package
// prefixes its own ("replay/after-lookup"); declaring a name twice panics.
func Declare(names ...string) {
	mu.Lock()
	defer mu.Unlock()
	for _, name := range names {
		if declared[name] {
			panic(fmt.Sprintf("failpoint: %q declared twice", name))
		}
		declared[name] = true
	}
}

// Inject runs the hook enabled at name, if any.
func Inject(ctx context.Context, name string, arg any) {
	m := active.Load()
	if m == nil {
		return
	}
	if h := (*m)[name]; h != nil {
		h(ctx, arg)
	}
}

// Enable registers hook at name, replacing any hook there, and returns a
// function that removes it. It panics when no package declared name. Hooks
// are process-wide: a test that enables one must not run in parallel with
// other tests reaching the same point, or its hook must ignore calls that
// are not its own.
func Enable(name string, hook Hook) (disable func()) {
	mu.Lock()
	defer mu.Unlock()
	if !declared[name] {
		panic(fmt.Sprintf("failpoint: %q is not declared", name))
	}
	swap(func(m map[string]Hook) { m[name] = hook })
	return func() {
		mu.Lock()
		defer mu.Unlock()
		swap(func(m map[string]Hook) { delete(m, name) })
	}
}

// swap publishes a changed copy of the active hooks; mu must be held.
func swap(change func(map[string]Hook)) {
	next := map[string]Hook{}
	if m := active.Load(); m != nil {
		for k, v := range *m {
			next[k] = v
		}
	}
	change(next)
	if len(next) == 0 {
		active.Store(nil)
		return
	}
	active.Store(&next)
}
