// Command runledger drives the runledger job ledger from the shell: it
// migrates the schema, defines job types, enqueues, claims, completes and
// fails jobs, replays succeeded jobs (compare-and-replay), shows a job with
// its history and lineage, and runs a self-contained demo.
//
// Run `runledger help` for the commands and `runledger help <command>` for
// each command's flags, output and exit codes; docs/CLI-REFERENCE.md has
// them all.
//
// The files, by concern:
//
//   - the command line itself: main.go (run), command.go (the registry and
//     the cobra tree), flags.go (flag values and spellings), help.go,
//     output.go (errors, exit codes, JSON), render.go (text forms),
//     input.go (bounded stdin), secrets.go, database.go (the connection);
//   - ledger writes: enqueue.go, enqueue_bulk.go, claim.go, finish.go
//     (complete, fail);
//   - reads: jobs.go (jobs show);
//   - replay and requeue, one and in bulk: replay.go, requeue.go,
//     replay_bulk.go, requeue_bulk.go, and their shared runner bulk.go,
//     bulk_list.go (--from lists), bulk_text.go;
//   - health.go (stats, prune), schedules.go, definitions.go and
//     definitions_pause.go, migrate.go;
//   - demo*.go (the guided demo), ui.go and server.go (the console).
package main

import (
	"context"
	"errors"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		// After the first signal, let a second one end the process at once.
		<-ctx.Done()
		stop()
	}()
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr, os.Getenv)
	stop()
	os.Exit(code)
}

// run runs one command line and returns the exit code. It is main without
// the process: args exclude the program name and getenv supplies
// DATABASE_URL.
func run(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	// Every output passes the password's redaction (secrets.go): the
	// streams, and each error before it is printed.
	red := redactorFor(args, getenv)
	stdout, stderr = red.Writer(stdout), red.Writer(stderr)
	writeError := func(w io.Writer, asJSON bool, cmd string, err error) {
		writeError(w, asJSON, cmd, redactError(red, err))
	}
	asJSON := wantsJSON(args)

	inv := &invocation{argv: args, stdin: os.Stdin, stdout: stdout, stderr: stderr, getenv: getenv, redact: red}
	var (
		res    result
		parsed bool // the command's flags and arguments were accepted
	)
	root, jsonFlag, urlFlag := newRoot(func(cmd *command, pos []string, runCmd runFunc) error {
		parsed = true
		inv.cmd, inv.args = cmd, pos
		var err error
		res, err = runCmd(ctx, inv)
		return err
	})
	inv.json, inv.databaseURL = jsonFlag, urlFlag
	root.SetHelpFunc(func(c *cobra.Command, _ []string) { printHelp(stdout, asJSON, c) })
	root.SetOut(stdout)
	root.SetErr(stderr)

	// Global flags may come before the command: runledger --json enqueue ...
	// They are read here only to find the command; cobra parses them again
	// with the command's own flags.
	args = normalizeArgs(args, root.PersistentFlags().Lookup, true)
	global := newFlagSet("runledger")
	defineGlobalFlags(global, false, "")
	global.SetInterspersed(false)
	if err := global.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return printHelp(stdout, asJSON, root)
		}
		writeError(stderr, asJSON, "", flagError("runledger", err))
		return exitUsage
	}
	words := global.Args()
	if len(words) == 0 {
		writeError(stderr, asJSON, "", usageErrorf("missing command; run 'runledger help' for the list"))
		return exitUsage
	}
	if words[0] == "help" {
		return helpCommand(root, stdout, stderr, asJSON, words[1:])
	}
	c, rest, group, err := find(root, words)
	if err != nil {
		if group != nil && len(words) > 1 && isHelpFlag(words[1]) {
			return printHelp(stdout, asJSON, group)
		}
		name := ""
		if group != nil {
			name = group.Name()
		}
		writeError(stderr, asJSON, name, err)
		return exitUsage
	}
	name := commandName(c)
	// A "--" ends the global flags as well: the command line cobra reads
	// has it removed, so that the command's words are found after it.
	prefix := args[:len(args)-len(words)]
	if n := len(prefix); n > 0 && prefix[n-1] == "--" {
		prefix = prefix[:n-1]
	}
	lookup := func(name string) *pflag.Flag {
		if f := c.Flags().Lookup(name); f != nil {
			return f
		}
		return root.PersistentFlags().Lookup(name)
	}
	cmdLine := append(append(append([]string{}, prefix...), strings.Fields(name)...), normalizeArgs(rest, lookup, false)...)
	root.SetArgs(cmdLine)
	defer inv.close()

	err = root.ExecuteContext(ctx)
	if err == nil && res == nil {
		return exitOK // help was printed
	}
	if parsed {
		asJSON = *inv.json
	}
	if err != nil {
		writeError(stderr, asJSON, name, err)
		return exitCode(err)
	}
	if _, done := res.(interface{ alreadyPrinted() }); done {
		// A long-running command printed its one line as it started.
	} else if asJSON {
		writeJSON(stdout, res)
	} else {
		res.text(stdout)
	}
	if ec, ok := res.(exitCoder); ok {
		return ec.exitCode()
	}
	return exitOK
}

// defineGlobalFlags defines --json and --database-url on fs with the given
// defaults (the values given before the command name).
func defineGlobalFlags(fs *flagSet, jsonDefault bool, urlDefault string) (*bool, *string) {
	j := fs.boolean("json", jsonDefault, "Print exactly one JSON object on stdout; errors become one JSON object {\"error\":{\"code\",\"category\",\"message\"}} on stderr.")
	u := fs.str("database-url", "`URL` of the PostgreSQL database (postgres://user:pass@host:5432/db). Default: the DATABASE_URL environment variable.")
	*u = urlDefault
	fs.global["json"], fs.global["database-url"] = true, true
	return j, u
}

// checkArgs enforces the command's positional argument count.
func checkArgs(cmd *command, pos []string) error {
	want := cmd.nargs()
	switch {
	case len(pos) > want:
		extra := pos[want]
		return usageErrorf("%s: unexpected argument %q", cmd.name, extra)
	case len(pos) < want:
		return usageErrorf("%s: missing argument %s", cmd.name, cmd.args)
	}
	return nil
}

func isHelpFlag(s string) bool {
	switch s {
	case "-h", "--h", "-help", "--help":
		return true
	}
	return false
}
