package console

import (
	"bytes"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"net/url"
	"time"

	"github.com/runledger-go/runledger"
)

// The console's files: templates rendered on the server, and the static
// assets (one small script, one style sheet) served from the binary.
//
//go:embed templates/*.html
var templateFiles embed.FS

//go:embed static
var staticFS embed.FS

// contentSecurityPolicy allows scripts, styles and requests from the
// console's own origin only: no inline script or style, no frame, no
// form posting elsewhere, no base-tag trick.
const contentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; " +
	"connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"

// secure sets the security headers on every response.
func secure(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hd := w.Header()
		hd.Set("Content-Security-Policy", contentSecurityPolicy)
		hd.Set("X-Content-Type-Options", "nosniff")
		hd.Set("X-Frame-Options", "DENY")
		hd.Set("Referrer-Policy", "no-referrer")
		hd.Set("Cross-Origin-Opener-Policy", "same-origin")
		hd.Set("Cross-Origin-Resource-Policy", "same-origin")
		h.ServeHTTP(w, r)
	})
}

// staticFiles serves the embedded assets.
func staticFiles() http.Handler {
	sub, err := fs.Sub(staticFS, "static")
	if err != nil {
		panic(err) // the embedded tree always has it
	}
	return http.FileServerFS(sub)
}

// pages is the parsed template set: one template per page, each with the
// shared layout.
type pages struct {
	byName map[string]*template.Template
}

// pageNames are the pages, each templates/<name>.html.
var pageNames = []string{"login", "overview", "jobs", "job", "bulk", "run", "error"}

func loadPages() (*pages, error) {
	funcs := template.FuncMap{
		"time":     formatTime,
		"timePtr":  formatTimePtr,
		"json":     formatJSON,
		"duration": formatDuration,
		// segment escapes a value for one path segment ("a/b" stays one).
		"segment": url.PathEscape,
	}
	p := &pages{byName: map[string]*template.Template{}}
	for _, name := range pageNames {
		t, err := template.New(name).Funcs(funcs).ParseFS(templateFiles, "templates/layout.html", "templates/"+name+".html")
		if err != nil {
			return nil, fmt.Errorf("console: parse template %s: %w", name, err)
		}
		p.byName[name] = t
	}
	return p, nil
}

// frame is what the layout shows around every page.
type frame struct {
	Prefix   string
	Title    string
	Operator string
	ReadOnly bool
	Scope    string  // "" when unscoped
	Outcome  outcome // an action's outcome, announced with role="status"
	Page     any
}

// render writes the page with status code, after rendering it whole, so a
// template error never leaves half a page.
func (c *console) render(w http.ResponseWriter, r *http.Request, code int, name string, page any) {
	c.renderOutcome(w, r, code, name, outcome{}, page)
}

// renderOutcome is render with an action's outcome to announce.
func (c *console) renderOutcome(w http.ResponseWriter, r *http.Request, code int, name string, o outcome, page any) {
	f := frame{Prefix: c.opts.Prefix, Title: name, Operator: operatorOf(r.Context()), ReadOnly: c.opts.ReadOnly,
		Outcome: o, Page: page}
	if c.opts.Scope != nil {
		f.Scope = c.opts.Scope.String()
	}
	var buf bytes.Buffer
	if err := c.pages.byName[name].ExecuteTemplate(&buf, "layout", f); err != nil {
		c.log.Error("console: render page", "page", name, "err", err)
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_, _ = w.Write(buf.Bytes())
}

// fail shows an error page: the library's message for its typed errors
// (written for clients, never database text), a generic one otherwise.
func (c *console) fail(w http.ResponseWriter, r *http.Request, err error) {
	code, msg := http.StatusInternalServerError, "Something went wrong; the error is in the console's log."
	var e *runledger.Error
	if errors.As(err, &e) {
		msg = e.Message
		switch e.Category {
		case runledger.CategoryValidation:
			code = http.StatusBadRequest
		case runledger.CategoryNotFound:
			code, msg = http.StatusNotFound, "No such job."
		case runledger.CategoryConflict:
			code = http.StatusConflict
		case runledger.CategoryTransient:
			code = http.StatusServiceUnavailable
		}
	}
	if code >= 500 {
		c.log.Error("console: request failed", "path", r.URL.Path, "err", err)
	}
	c.render(w, r, code, "error", msg)
}

// notFound shows the 404 page.
func (c *console) notFound(w http.ResponseWriter, r *http.Request) {
	c.render(w, r, http.StatusNotFound, "error", "No such job.")
}

func formatTime(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05.000Z") }

func formatTimePtr(t *time.Time) string {
	if t == nil {
		return "—"
	}
	return formatTime(*t)
}

func formatDuration(d *time.Duration) string {
	if d == nil {
		return "—"
	}
	return d.Round(time.Millisecond).String()
}

// formatJSON indents stored JSON for reading; the template escapes it.
func formatJSON(raw json.RawMessage) string {
	if len(raw) == 0 {
		return "—"
	}
	var buf bytes.Buffer
	if err := json.Indent(&buf, raw, "", "  "); err != nil {
		return string(raw)
	}
	return buf.String()
}
