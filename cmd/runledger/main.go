// Command runledger drives the runledger job ledger from the shell: it
// migrates the schema, defines job types, enqueues, claims, completes and
// fails jobs, replays succeeded jobs (compare-and-replay), shows a job with
// its history and lineage, and runs a self-contained demo.
//
// Run `runledger help` for the commands and `runledger help <command>` for
// each command's flags, output and exit codes.
package main

import (
	"context"
	"errors"
	"flag"
	"io"
	"os"
	"os/signal"
	"syscall"
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
	argv := args

	// Global flags may come before the command: runledger --json enqueue ...
	global := newFlagSet("runledger")
	jsonFlag, urlFlag := defineGlobalFlags(global, false, "")
	if err := global.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return printHelp(stdout, asJSON, nil, "")
		}
		writeError(stderr, asJSON, "", flagError("runledger", err))
		return exitUsage
	}
	args = global.Args()
	if len(args) == 0 {
		writeError(stderr, asJSON, "", usageErrorf("missing command; run 'runledger help' for the list"))
		return exitUsage
	}
	if args[0] == "help" {
		return helpCommand(stdout, stderr, asJSON, args[1:])
	}

	cmd, rest, group, err := lookup(args)
	if err != nil {
		if group != "" && len(args) > 1 && isHelpFlag(args[1]) {
			return printHelp(stdout, asJSON, nil, group)
		}
		writeError(stderr, asJSON, group, err)
		return exitUsage
	}

	fs := newFlagSet(cmd.name)
	inv := &invocation{cmd: cmd, argv: argv, stdin: os.Stdin, stdout: stdout, stderr: stderr, getenv: getenv, redact: red}
	inv.json, inv.databaseURL = defineGlobalFlags(fs, *jsonFlag, *urlFlag)
	runCmd := cmd.setup(fs)
	pos, err := fs.parse(cmd.name, rest)
	if errors.Is(err, flag.ErrHelp) {
		return printHelp(stdout, asJSON, cmd, "")
	}
	if err == nil {
		err = checkArgs(cmd, pos)
	}
	if err != nil {
		writeError(stderr, asJSON, cmd.name, err)
		return exitUsage
	}
	inv.args = pos
	asJSON = *inv.json
	defer inv.close()

	res, err := runCmd(ctx, inv)
	if err != nil {
		writeError(stderr, asJSON, cmd.name, err)
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
