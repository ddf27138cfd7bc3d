package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/console"
)

// defaultUIListen is where `runledger ui` listens without --listen: the
// loopback interface, on a free port the system picks (printed at start).
const defaultUIListen = "127.0.0.1:0"

var uiCmd = &command{
	name:    "ui",
	summary: "Serve the operator console in a browser, with a one-time login token.",
	help: `Serves the operator console (pages over the job ledger, and replay,
requeue and cancel as compare-and-set actions) until SIGINT or SIGTERM. It
listens on 127.0.0.1 on a free port unless --listen says otherwise, and
prints the console's address and a login address carrying a random token,
made at start and printed only there; opening it sets a session cookie.
Scripts may send "Authorization: Bearer TOKEN" instead. The database
password is never printed. With --org every page and action is limited to
that organization (another tenant's job is 404); with --read-only every
action is refused (403). /healthz needs no login; /metrics serves the
Prometheus series.

Output (--json), one line at start:
  {"outcome":"ui","url":URL,"login_url":URL}

Exit codes: 0 stopped by a signal; 2 invalid input; 1 other errors (the
address cannot be listened on, the database cannot be reached).`,
	setup: func(fs *flagSet) runFunc {
		listen := fs.str("listen", "`ADDR`: the address to listen on, host:port (port 0: a free one). Default: 127.0.0.1:0.")
		org := fs.uuidFlag("org", "`UUID`: limit every page and action to this organization (tenant). Default: every tenant.")
		readOnly := fs.boolean("read-only", false, "Refuse every action on the server (403) and show no action buttons.")
		return func(ctx context.Context, inv *invocation) (result, error) {
			addr := *listen
			if addr == "" {
				addr = defaultUIListen
			}
			if _, _, err := net.SplitHostPort(addr); err != nil {
				return nil, invalidArgf("--listen %q is not host:port", addr)
			}
			opts := console.Options{ReadOnly: *readOnly}
			if *org != nil {
				s := runledger.Organization(**org)
				opts.Scope = &s
			}
			pool, err := inv.Pool(ctx)
			if err != nil {
				return nil, err
			}
			if opts.Token, err = console.NewToken(); err != nil {
				return nil, err
			}
			h, err := console.New(pool, opts)
			if err != nil {
				return nil, err
			}
			ln, err := net.Listen("tcp", addr)
			if err != nil {
				return nil, fmt.Errorf("ui: listen on %s: %w", addr, err)
			}
			base := "http://" + ln.Addr().String()
			start := uiStart{Outcome: "ui", URL: base + "/", LoginURL: base + "/login?token=" + opts.Token}
			if inv.asJSON() {
				writeJSON(inv.stdout, start)
			} else {
				start.text(inv.stdout)
			}
			srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
			done := make(chan error, 1)
			go func() { done <- srv.Serve(ln) }()
			select {
			case err := <-done:
				return nil, fmt.Errorf("ui: serve: %w", err)
			case <-ctx.Done():
			}
			shutdown, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			if err := srv.Shutdown(shutdown); err != nil && !errors.Is(err, http.ErrServerClosed) {
				return nil, fmt.Errorf("ui: shut down: %w", err)
			}
			return uiStopped{}, nil
		}
	},
}

// uiStart is the line `runledger ui` prints once it listens.
type uiStart struct {
	Outcome  string `json:"outcome"`
	URL      string `json:"url"`
	LoginURL string `json:"login_url"`
}

func (s uiStart) text(w io.Writer) {
	fmt.Fprintf(w, "Console: %s\nLog in:  %s\n(the token is printed only here; Ctrl-C stops the console)\n", s.URL, s.LoginURL)
}

// uiStopped is the end of a console stopped by a signal: its one line was
// printed at start, so nothing more is.
type uiStopped struct{}

func (uiStopped) text(io.Writer) {}

func (uiStopped) alreadyPrinted() {}
