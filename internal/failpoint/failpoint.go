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
	active   atomic.Pointer[map[string]enabled]
)

// enabled is a hook and the filter of the calls it wants (nil: all).
type enabled struct {
	hook  Hook
	wants func(ctx context.Context) bool
}

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
	if e, ok := (*m)[name]; ok {
		e.hook(ctx, arg)
	}
}

// Wanted reports whether the hook enabled at name wants the call whose
// context is ctx: a hook enabled with Enable wants every call, one enabled
// with EnableFor those its filter accepts. An operation that changes its
// shape so that a hook can run (one round trip sent in two) asks first, so
// that calls no hook wants keep their shape while other tests run.
func Wanted(ctx context.Context, name string) bool {
	m := active.Load()
	if m == nil {
		return false
	}
	e, ok := (*m)[name]
	return ok && (e.wants == nil || e.wants(ctx))
}

// Enable registers hook at name, replacing any hook there, and returns a
// function that removes it. It panics when no package declared name. Hooks
// are process-wide: a test that enables one must not run in parallel with
// other tests reaching the same point, or its hook must ignore calls that
// are not its own.
func Enable(name string, hook Hook) (disable func()) { return EnableFor(name, hook, nil) }

// EnableFor is Enable with a filter for Wanted: only calls whose context
// wants accepts ask for the hook (nil accepts all). The hook still runs at
// every call that reaches the point and should ignore the others.
func EnableFor(name string, hook Hook, wants func(ctx context.Context) bool) (disable func()) {
	mu.Lock()
	defer mu.Unlock()
	if !declared[name] {
		panic(fmt.Sprintf("failpoint: %q is not declared", name))
	}
	swap(func(m map[string]enabled) { m[name] = enabled{hook, wants} })
	return func() {
		mu.Lock()
		defer mu.Unlock()
		swap(func(m map[string]enabled) { delete(m, name) })
	}
}

// swap publishes a changed copy of the active hooks; mu must be held.
func swap(change func(map[string]enabled)) {
	next := map[string]enabled{}
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
