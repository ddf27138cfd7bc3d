// Command gendoc writes docs/ERRORS.md from the error catalogue
// (errs.Catalogue): the error model, the exit codes of the command line,
// and one table per category with each code's exit code and meaning.
//
//	go generate ./internal/errs
package main

import (
	"bytes"
	_ "embed"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/template"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/internal/errs"
)

//go:embed page.md.tmpl
var pageTemplate string

func main() {
	out := flag.String("o", "", "write the page to this file (default: standard output)")
	flag.Parse()
	var buf bytes.Buffer
	if err := render(&buf); err != nil {
		fmt.Fprintln(os.Stderr, "gendoc:", err)
		os.Exit(1)
	}
	if *out == "" {
		_, _ = os.Stdout.Write(buf.Bytes())
		return
	}
	if err := os.WriteFile(*out, buf.Bytes(), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "gendoc:", err)
		os.Exit(1)
	}
}

// section is one category's table on the page.
type section struct {
	Category runledger.Category
	Summary  string
	Rows     []row
}

type row struct {
	Code    runledger.Code
	Exit    int
	Meaning string
}

// categories gives the page's order of the categories and what a caller
// does about each.
var categories = []struct {
	cat     runledger.Category
	summary string
}{
	{runledger.CategoryValidation, "The request is invalid; retrying it unchanged fails again. Nothing was written."},
	{runledger.CategoryConflict, "The request contradicts state that exists."},
	{runledger.CategoryNotFound, "Nothing of that id in the caller's scope."},
	{runledger.CategoryForbidden, "The database refused the operation's privileges."},
	{runledger.CategoryTransient, "The database could not finish this time; the same request may succeed if retried."},
	{runledger.CategoryInternal, "A bug, a broken invariant or an unclassified database failure; log all of it."},
}

// exitCode is the exit status of the runledger command for an error of
// entry e, as the command maps it: a lease mismatch is an expectation
// mismatch (3); otherwise validation 2, not found 4, conflict 5, and
// every other category 1.
func exitCode(e errs.Entry) int {
	if e.Code == runledger.CodeLeaseMismatch {
		return 3
	}
	switch e.Category {
	case runledger.CategoryValidation:
		return 2
	case runledger.CategoryNotFound:
		return 4
	case runledger.CategoryConflict:
		return 5
	}
	return 1
}

// render writes the page.
func render(w io.Writer) error {
	sections := make([]section, 0, len(categories))
	placed := 0
	for _, c := range categories {
		s := section{Category: c.cat, Summary: c.summary}
		for _, e := range errs.Catalogue {
			if e.Category == c.cat {
				s.Rows = append(s.Rows, row{Code: e.Code, Exit: exitCode(e), Meaning: e.Meaning})
			}
		}
		placed += len(s.Rows)
		sections = append(sections, s)
	}
	if placed != len(errs.Catalogue) {
		return fmt.Errorf("%d catalogue entries have a category the page does not list", len(errs.Catalogue)-placed)
	}
	t, err := template.New("page").Funcs(template.FuncMap{"cell": cell}).Parse(pageTemplate)
	if err != nil {
		return err
	}
	return t.Execute(w, map[string]any{"Sections": sections, "Count": len(errs.Catalogue), "Recorded": errs.Recorded})
}

// cell makes s safe inside a Markdown table cell.
func cell(s string) string {
	return strings.ReplaceAll(s, "|", `\|`)
}
