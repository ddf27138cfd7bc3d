// Package planaudit reads the statements sqlc generated into db/ exactly as
// the library sends them, with the names of their parameters, so that
// tests can check their query plans (TestPlans, in this package) and
// derive benchmark scripts from them (package bench).
//
// To check the plans of every statement in queries/ (a new one included)
// against a database of 50,000 jobs with fresh statistics:
//
//	go test ./internal/testdb/planaudit -run TestPlans -v
package planaudit

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// Query is one generated statement.
type Query struct {
	// Name is the sqlc name (JobReplayInsert); Kind its annotation
	// (:one, :many, :exec, :execresult, ...).
	Name, Kind string
	// SQL is the text the generated method sends, "-- name:" line included.
	SQL string
	// Params names the arguments of $1, $2, ... in order, as the generated
	// method passes them: the field of its params struct (SourceJobID) or,
	// for a single parameter, the argument's own name.
	Params []string
	// File is the generated file (job_replays.sql.go).
	File string
}

var nameLine = regexp.MustCompile(`^-- name: (\w+) (:\w+)`)

// Load parses the generated Go files in dir (the db package) and returns
// every query, sorted by name.
func Load(dir string) ([]Query, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.sql.go"))
	if err != nil {
		return nil, err
	}
	var out []Query
	fset := token.NewFileSet()
	for _, path := range files {
		src, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		f, err := parser.ParseFile(fset, path, src, 0)
		if err != nil {
			return nil, err
		}
		consts := map[string]string{} // Go constant name -> SQL
		for _, decl := range f.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, name := range vs.Names {
					lit, ok := vs.Values[i].(*ast.BasicLit)
					if !ok || lit.Kind != token.STRING {
						continue
					}
					sql, err := strconv.Unquote(lit.Value)
					if err != nil {
						return nil, fmt.Errorf("%s: constant %s: %w", path, name.Name, err)
					}
					if nameLine.MatchString(sql) {
						consts[name.Name] = sql
					}
				}
			}
		}
		// The arguments each method passes after ctx and the SQL constant.
		params := map[string][]string{}
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok || len(call.Args) < 2 {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok || (sel.Sel.Name != "QueryRow" && sel.Sel.Name != "Query" && sel.Sel.Name != "Exec") {
				return true
			}
			id, ok := call.Args[1].(*ast.Ident)
			if !ok {
				return true
			}
			if _, ok := consts[id.Name]; !ok {
				return true
			}
			var names []string
			for _, a := range call.Args[2:] {
				switch a := a.(type) {
				case *ast.SelectorExpr:
					names = append(names, a.Sel.Name)
				case *ast.Ident:
					names = append(names, a.Name)
				default:
					names = append(names, fmt.Sprintf("arg%d", len(names)+1))
				}
			}
			params[id.Name] = names
			return true
		})
		for c, sql := range consts {
			m := nameLine.FindStringSubmatch(sql)
			out = append(out, Query{Name: m[1], Kind: m[2], SQL: sql, Params: params[c], File: filepath.Base(path)})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// Get returns the query named name.
func Get(qs []Query, name string) (Query, bool) {
	for _, q := range qs {
		if q.Name == name {
			return q, true
		}
	}
	return Query{}, false
}

// Body returns the statement without its "-- name:" line and trailing
// white space.
func (q Query) Body() string {
	_, body, _ := strings.Cut(q.SQL, "\n")
	return strings.TrimSpace(body)
}

// IsUtility reports a transaction-control or session statement (BEGIN,
// COMMIT, ROLLBACK, SET, SHOW, LISTEN, ...), which has no plan.
func (q Query) IsUtility() bool {
	first := strings.ToUpper(strings.Fields(q.Body() + " x")[0])
	switch first {
	case "BEGIN", "START", "COMMIT", "END", "ROLLBACK", "ABORT", "SET", "RESET", "SHOW", "SAVEPOINT", "RELEASE", "LISTEN", "UNLISTEN":
		return true
	}
	return false
}

var dollarParam = regexp.MustCompile(`\$(\d+)`)

// Substitute returns the body with each $n replaced by repl(name of $n).
func (q Query) Substitute(repl func(param string) string) (string, error) {
	var err error
	out := dollarParam.ReplaceAllStringFunc(q.Body(), func(m string) string {
		n, _ := strconv.Atoi(m[1:])
		if n < 1 || n > len(q.Params) {
			err = fmt.Errorf("%s: $%d has no argument", q.Name, n)
			return m
		}
		return repl(q.Params[n-1])
	})
	return out, err
}
