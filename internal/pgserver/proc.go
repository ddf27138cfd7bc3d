package pgserver

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// process is a child started by startProcess; done is closed once it has
// exited and been reaped, after which err holds cmd.Wait's result.
type process struct {
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

// startProcess starts cmd with deathSig as its parent-death signal.
//
// The kernel sends the parent-death signal when the *thread* that forked the
// child exits, not when the process does. The Go runtime may fork from any
// thread and may end a thread that a locked goroutine leaves behind, so the
// child is forked from a goroutine locked to its thread, and that goroutine
// stays (waiting for the child) until the child has exited. The signal then
// fires only when this whole process dies, which is the point: a test binary
// killed by a timeout, a panic or SIGKILL takes its server with it.
func startProcess(cmd *exec.Cmd, deathSig syscall.Signal) (*process, error) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	// Go sets the parent-death signal after switching credentials, so it
	// survives the setuid to the postgres user (a setuid clears it).
	cmd.SysProcAttr.Pdeathsig = deathSig
	// Its own process group: a Ctrl-C in the terminal goes to the
	// foreground group, and the server must not shut down before the test
	// binary has run its cleanup.
	cmd.SysProcAttr.Setpgid = true

	p := &process{cmd: cmd, done: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		p.err = cmd.Wait()
		close(p.done)
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	return p, nil
}

// waitFor waits up to d for the process to exit and reports whether it did.
func (p *process) waitFor(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-p.done:
		return true
	case <-t.C:
		return false
	}
}

// run waits for a process started by startProcess to finish, killing it if
// ctx ends first.
func (p *process) run(ctx context.Context) error {
	select {
	case <-p.done:
		return p.err
	case <-ctx.Done():
		_ = p.cmd.Process.Kill()
		<-p.done
		return ctx.Err()
	}
}

// stop sends sig and waits up to grace for the process to exit; a server
// that ignores it gets SIGQUIT (immediate shutdown), then SIGKILL. It
// returns an error only if the process survives all of that.
func (p *process) stop(sig syscall.Signal, grace time.Duration, logf func(string, ...any)) error {
	pid := p.cmd.Process.Pid
	_ = p.cmd.Process.Signal(sig) // fails only if already exited
	if p.waitFor(grace) {
		return nil
	}
	if sig != syscall.SIGQUIT {
		logf("pgserver: postgres (pid %d) still running %s after %s; sending SIGQUIT", pid, grace, sig)
		_ = p.cmd.Process.Signal(syscall.SIGQUIT)
		if p.waitFor(5 * time.Second) {
			return nil
		}
	}
	logf("pgserver: postgres (pid %d) still running; sending SIGKILL", pid)
	_ = p.cmd.Process.Kill()
	if p.waitFor(5 * time.Second) {
		return nil
	}
	return fmt.Errorf("postgres (pid %d) did not exit after SIGKILL", pid)
}

// serverCredential returns the credential to run initdb and postgres with:
// nil when not root (run as ourselves), the postgres OS user when root,
// because both programs refuse to run as root.
func serverCredential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("running as root, and PostgreSQL refuses to run as root, "+
			"but there is no postgres OS user to run it as: %w", err)
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("postgres user uid %q: %w", u.Uid, err)
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("postgres user gid %q: %w", u.Gid, err)
	}
	// Groups empty and NoSetGroups false: drop root's supplementary groups.
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}, nil
}

// childEnv is our environment without the variables that would change what
// the server programs do or print: libpq's PG* settings, and the locale
// (C, so the log text matched in isBindFailure stays English). A non-empty
// lib (see libDir) goes first on LD_LIBRARY_PATH.
func childEnv(lib string) []string {
	var env []string
	ldPath := ""
	for _, kv := range os.Environ() {
		name, value, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, "PG") || strings.HasPrefix(name, "LC_") || name == "LANG" || name == "LANGUAGE" {
			continue
		}
		if name == "LD_LIBRARY_PATH" && lib != "" {
			ldPath = value
			continue
		}
		env = append(env, kv)
	}
	if lib != "" {
		if ldPath != "" {
			lib += ":" + ldPath
		}
		env = append(env, "LD_LIBRARY_PATH="+lib)
	}
	return append(env, "LC_ALL=C")
}

// processAlive reports whether a process with this pid exists (EPERM means
// it exists but belongs to someone else).
func processAlive(pid int) bool {
	if pid <= 0 {
		return false
	}
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
