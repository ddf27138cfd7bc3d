package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

//go:generate go test -run TestCLIReferenceIsCurrent -update-reference .

// referencePath is the generated CLI reference page, relative to this
// package's directory.
const referencePath = "../../docs/CLI-REFERENCE.md"

// writeReference writes the CLI reference page: the help of runledger,
// then of every group and command, in the order `runledger help` lists
// them, all generated from the cobra tree.
func writeReference(w io.Writer, root *cobra.Command) {
	fmt.Fprint(w, `# runledger command reference

Generated from the command definitions by `+"`go generate ./cmd/runledger`"+`; do not
edit. Each section is what `+"`runledger help <command>`"+` prints. The guide to the
command line is [CLI.md](CLI.md).

`)
	section := func(title string, c *cobra.Command) {
		fmt.Fprintf(w, "## %s\n\n```text\n%s```\n\n", title, helpText(c))
	}
	section("runledger", root)
	var cmds []*cobra.Command
	for _, c := range root.Commands() {
		if c.Hidden {
			continue
		}
		cmds = append(cmds, c)
		cmds = append(cmds, leaves(c)...)
	}
	for _, c := range cmds {
		section("runledger "+commandName(c), c)
	}
}

// reference is the CLI reference page as a string.
func reference() string {
	root, _, _ := newRoot(func(*command, []string, runFunc) error { return nil })
	var b strings.Builder
	writeReference(&b, root)
	return strings.TrimRight(b.String(), "\n") + "\n"
}

var updateReference = flag.Bool("update-reference", false, "rewrite docs/CLI-REFERENCE.md from the command definitions")

// TestCLIReferenceIsCurrent fails when the committed CLI reference page is
// not what the command definitions generate (go generate ./cmd/runledger
// rewrites it).
func TestCLIReferenceIsCurrent(t *testing.T) {
	t.Parallel()
	want := reference()
	if *updateReference {
		if err := os.WriteFile(referencePath, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	got, err := os.ReadFile(referencePath)
	if err != nil {
		t.Fatalf("%v (run go generate ./cmd/runledger)", err)
	}
	if string(got) != want {
		t.Errorf("%s is not current: run go generate ./cmd/runledger", referencePath)
	}
}
