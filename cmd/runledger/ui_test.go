package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/runledger-go/runledger/internal/testdb"
)

// TestUIServesUntilCanceled: `runledger ui --json` prints one line with
// the console's address and login address (and not the database
// password), the login address signs in, and canceling the command's
// context (as SIGINT does) stops it with exit 0 and nothing more printed.
func TestUIServesUntilCanceled(t *testing.T) {
	url := testdb.NewURL(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	outR, outW := io.Pipe()
	var stderr strings.Builder
	code := make(chan int, 1)
	go func() {
		code <- run(ctx, []string{"ui", "--json", "--read-only"}, outW, &stderr, func(k string) string {
			if k == "DATABASE_URL" {
				return url
			}
			return ""
		})
		outW.Close()
	}()
	sc := bufio.NewScanner(outR)
	if !sc.Scan() {
		t.Fatalf("no start line; stderr: %s", stderr.String())
	}
	line := sc.Text()
	var start struct {
		Outcome  string `json:"outcome"`
		URL      string `json:"url"`
		LoginURL string `json:"login_url"`
	}
	if err := json.Unmarshal([]byte(line), &start); err != nil || start.Outcome != "ui" ||
		!strings.HasPrefix(start.URL, "http://127.0.0.1:") || !strings.HasPrefix(start.LoginURL, start.URL+"login?token=") {
		t.Fatalf("start line %s: %v", line, err)
	}
	if strings.Contains(line, "postgres") || strings.Contains(line, "password") {
		t.Fatalf("start line names the database: %s", line)
	}
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := noFollow.Get(start.LoginURL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther || len(resp.Cookies()) != 1 {
		t.Fatalf("login answered %d with cookies %v", resp.StatusCode, resp.Cookies())
	}
	cancel()
	if c := <-code; c != exitOK {
		t.Fatalf("exit %d after cancel; stderr: %s", c, stderr.String())
	}
	if sc.Scan() {
		t.Fatalf("printed more after the start line: %s", sc.Text())
	}
}
