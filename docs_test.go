package runledger_test

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// markdownLink matches an inline link or image, [text](target), with an
// optional title after the target.
var markdownLink = regexp.MustCompile(`\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)

// inlineCode matches a code span, whose text is not a link.
var inlineCode = regexp.MustCompile("`[^`]*`")

// TestMarkdownLinksResolve fails when a relative link in a Markdown file of
// the repository (README, CHANGELOG, docs/, ...) names a file that does not
// exist or a heading that the target page does not have.
func TestMarkdownLinksResolve(t *testing.T) {
	t.Parallel()
	var pages []string
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if path != "." && (strings.HasPrefix(name, ".") || name == "testdata" || name == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(path, ".md") {
			pages = append(pages, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(pages) == 0 {
		t.Fatal("no Markdown files found")
	}
	anchors := map[string]map[string]bool{}
	anchorsOf := func(page string) (map[string]bool, error) {
		if a, ok := anchors[page]; ok {
			return a, nil
		}
		src, err := os.ReadFile(page)
		if err != nil {
			return nil, err
		}
		a := headingAnchors(string(src))
		anchors[page] = a
		return a, nil
	}
	checked := 0
	for _, page := range pages {
		src, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range proseLines(string(src)) {
			if line == "" {
				continue
			}
			line = inlineCode.ReplaceAllString(line, "")
			for _, m := range markdownLink.FindAllStringSubmatch(line, -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				checked++
				file, anchor, _ := strings.Cut(target, "#")
				dest := page
				if file != "" {
					dest = filepath.Join(filepath.Dir(page), filepath.FromSlash(file))
					if _, err := os.Stat(dest); err != nil {
						t.Errorf("%s:%d: link %q: %s does not exist", page, i+1, target, dest)
						continue
					}
				}
				if anchor == "" || !strings.HasSuffix(dest, ".md") {
					continue
				}
				a, err := anchorsOf(dest)
				if err != nil {
					t.Errorf("%s:%d: link %q: %v", page, i+1, target, err)
					continue
				}
				if !a[anchor] {
					t.Errorf("%s:%d: link %q: %s has no heading #%s", page, i+1, target, dest, anchor)
				}
			}
		}
	}
	if checked == 0 {
		t.Fatal("no relative links found; the link pattern is broken")
	}
}

// proseLines returns the lines of a Markdown page with the lines of fenced
// code blocks blanked, so that line numbers stay right.
func proseLines(src string) []string {
	lines := strings.Split(src, "\n")
	inFence := false
	for i, line := range lines {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			inFence = !inFence
			lines[i] = ""
			continue
		}
		if inFence {
			lines[i] = ""
		}
	}
	return lines
}

// headingAnchors returns the anchors GitHub gives the headings of a page:
// the heading's text in lower case, spaces turned into hyphens, punctuation
// other than hyphens and underscores dropped, and -1, -2, ... appended to
// repeats.
func headingAnchors(src string) map[string]bool {
	anchors := map[string]bool{}
	seen := map[string]int{}
	for _, line := range proseLines(src) {
		if !strings.HasPrefix(line, "#") {
			continue
		}
		text := strings.TrimLeft(line, "#")
		if !strings.HasPrefix(text, " ") {
			continue
		}
		text = strings.ReplaceAll(strings.TrimSpace(text), "`", "")
		var b strings.Builder
		for _, r := range strings.ToLower(text) {
			switch {
			case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
				b.WriteRune(r)
			case r == ' ':
				b.WriteByte('-')
			}
		}
		slug := b.String()
		if n := seen[slug]; n > 0 {
			anchors[fmt.Sprintf("%s-%d", slug, n)] = true
		} else {
			anchors[slug] = true
		}
		seen[slug]++
	}
	return anchors
}

// goBlock matches a fenced Go code block of a Markdown page.
var goBlock = regexp.MustCompile("(?s)```go\n(.*?)```")

// TestReadmeProgramsBuild fails when a complete program of README.md (a
// Go block of package main) does not build against the module as it is. The programs are laid over the module through go's -overlay, as
// packages of their own that exist nowhere on disk.
func TestReadmeProgramsBuild(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds the README's programs with the go command")
	}
	goCmd, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH")
	}
	src, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	root, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	replace := map[string]string{}
	var pkgs []string
	for i, m := range goBlock.FindAllStringSubmatch(string(src), -1) {
		if !strings.HasPrefix(strings.TrimSpace(m[1]), "package main") {
			continue
		}
		file := filepath.Join(dir, fmt.Sprintf("program%d.go", i))
		if err := os.WriteFile(file, []byte(m[1]), 0o600); err != nil {
			t.Fatal(err)
		}
		pkg := fmt.Sprintf("internal/readmeprogram%d", i)
		replace[filepath.Join(root, filepath.FromSlash(pkg), "main.go")] = file
		pkgs = append(pkgs, "./"+pkg)
	}
	if len(pkgs) < 2 {
		t.Fatalf("README.md has %d complete programs, want the library's and the worker's", len(pkgs))
	}
	overlay, err := json.Marshal(map[string]any{"Replace": replace})
	if err != nil {
		t.Fatal(err)
	}
	overlayFile := filepath.Join(dir, "overlay.json")
	if err := os.WriteFile(overlayFile, overlay, 0o600); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "bin") + string(filepath.Separator)
	cmd := exec.Command(goCmd, append([]string{"build", "-overlay", overlayFile, "-o", bin}, pkgs...)...)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build of README.md's programs: %v\n%s", err, out)
	}
}
