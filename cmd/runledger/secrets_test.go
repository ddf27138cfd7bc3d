package main

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/runledger-go/runledger/internal/failpoint"
	"github.com/runledger-go/runledger/internal/pgserver"
	"github.com/runledger-go/runledger/internal/redact"
	"github.com/runledger-go/runledger/internal/testdb"
	"github.com/runledger-go/runledger/internal/txn"
)

// The password of a connection string is never printed, whatever the form
// that carries it and whatever the failure. These tests run the command in
// process, as main does, with PGPASSWORD and DATABASE_URL set for it, so
// they do not run in parallel.

// testPassword is the password of the table: every character that needs
// an escape in some form (URL, keyword/value quoting, JSON, the shell).
const testPassword = `S3cr3t pw'"\@:/?&=%#€`

// plainPassword is the password of the unquoted keyword/value form.
const plainPassword = "Plain-Secret-42"

// percentAll percent-encodes every byte of s but letters and digits.
func percentAll(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02x", c) // lower case: pgx accepts it
		}
	}
	return b.String()
}

func kvQuote(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'"
}

// dsnForm builds a connection string to host:port/dbname as user with a
// password, and says which password pgx will take from it (and whether it
// comes from PGPASSWORD).
type dsnForm struct {
	name     string
	password string
	env      bool // PGPASSWORD carries it; the string has none
	build    func(host, port, dbname, user, password string) string
}

var dsnForms = []dsnForm{
	{"url user info", testPassword, false, func(h, p, d, u, pw string) string {
		return (&url.URL{Scheme: "postgres", User: url.UserPassword(u, pw), Host: net.JoinHostPort(h, p), Path: "/" + d, RawQuery: "sslmode=disable"}).String()
	}},
	{"url user info, every byte encoded", testPassword, false, func(h, p, d, u, pw string) string {
		return "postgresql://" + u + ":" + percentAll(pw) + "@" + net.JoinHostPort(h, p) + "/" + d + "?sslmode=disable"
	}},
	{"url query parameter", testPassword, false, func(h, p, d, u, pw string) string {
		return "postgres://" + net.JoinHostPort(h, p) + "/" + d + "?sslmode=disable&user=" + u + "&password=" + percentAll(pw)
	}},
	{"url user info and query parameter", testPassword, false, func(h, p, d, u, pw string) string {
		return "postgres://" + u + ":decoy@" + net.JoinHostPort(h, p) + "/" + d + "?sslmode=disable&password=" + percentAll(pw)
	}},
	{"keyword/value quoted", testPassword, false, func(h, p, d, u, pw string) string {
		return fmt.Sprintf("host=%s port=%s dbname=%s user=%s password=%s sslmode=disable", h, p, d, u, kvQuote(pw))
	}},
	{"keyword/value spaced", testPassword, false, func(h, p, d, u, pw string) string {
		return fmt.Sprintf("host = %s   port=%s dbname= %s user =%s  password  =  %s sslmode=disable", h, p, d, u, kvQuote(pw))
	}},
	{"keyword/value unquoted", plainPassword, false, func(h, p, d, u, pw string) string {
		return fmt.Sprintf("password=%s host=%s port=%s dbname=%s user=%s sslmode=disable", pw, h, p, d, u)
	}},
	{"PGPASSWORD", testPassword, true, func(h, p, d, u, _ string) string {
		return "postgres://" + u + "@" + net.JoinHostPort(h, p) + "/" + d + "?sslmode=disable"
	}},
}

// failurePath is a way to fail connecting: where to connect, as whom.
type failurePath struct {
	name           string
	host, port, db string
	user           string
	wantText       string // in the error message
}

// passwordServer starts a throwaway server that asks every role but
// postgres for a password (scram-sha-256 over TCP).
func passwordServer(t *testing.T) *pgserver.Server {
	t.Helper()
	// Not under t.TempDir, whose parent only root may enter: the server
	// runs as postgres when the tests run as root.
	dir, err := os.MkdirTemp("", "runledger-hba-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	hba := filepath.Join(dir, "pg_hba.conf")
	conf := "local all all trust\nhost all postgres 127.0.0.1/32 trust\nhost all all 127.0.0.1/32 scram-sha-256\n"
	if err := os.WriteFile(hba, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	srv, err := pgserver.Start(testdb.Context(t), pgserver.Options{Settings: map[string]string{"hba_file": hba}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Stop() })
	return srv
}

// secretCommands are command lines that pass their own checks and then
// connect: every command of the command line that uses a database.
var secretCommands = [][]string{
	{"migrate", "up"}, {"migrate", "down"}, {"migrate", "status"}, {"migrate", "version"},
	{"definitions", "upsert", "--type", "t"},
	{"enqueue", "--type", "t"},
	{"claim", "--worker", "w"},
	{"complete", "--job", "0b6f6f2e-7a8a-4a43-9d2c-8f0f8f0f8f0f", "--run", "1", "--attempt", "1", "--worker", "w"},
	{"fail", "--job", "0b6f6f2e-7a8a-4a43-9d2c-8f0f8f0f8f0f", "--run", "1", "--attempt", "1", "--worker", "w"},
	{"replay", "--job", "0b6f6f2e-7a8a-4a43-9d2c-8f0f8f0f8f0f", "--run", "1", "--key", "k", "--reason", "r"},
	{"replay-bulk", "--type", "t", "--key", "k", "--reason", "r"},
	{"requeue", "--job", "0b6f6f2e-7a8a-4a43-9d2c-8f0f8f0f8f0f", "--status", "DEAD_LETTERED", "--run", "1", "--reason", "r"},
	{"requeue-bulk", "--status", "DEAD_LETTERED", "--reason", "r"},
	{"jobs", "show", "0b6f6f2e-7a8a-4a43-9d2c-8f0f8f0f8f0f"},
	{"schedules", "upsert", "--name", "n", "--cron", "* * * * *", "--type", "t"},
	{"schedules", "list"}, {"schedules", "show", "--name", "n"}, {"schedules", "pause", "--name", "n"},
	{"schedules", "resume", "--name", "n"}, {"schedules", "delete", "--name", "n"},
	{"stats"},
	{"prune", "--older-than", "720h"},
	{"demo"},
}

// leakForms are the forms of p a reader could decode it from.
func leakForms(p string) []string {
	q := strconv.Quote(p)
	return []string{p, url.QueryEscape(p), url.PathEscape(p), percentAll(p), q[1 : len(q)-1], strings.ReplaceAll(p, `'`, `'\''`)}
}

// wantNoPassword fails the test when out holds password in a form a
// reader could decode: as is, escaped (backslashes, as in keyword/value
// quoting, JSON or Go strings), or percent encoded.
func wantNoPassword(t *testing.T, what, out, password string) {
	t.Helper()
	for _, f := range leakForms(password) {
		if strings.Contains(out, f) {
			t.Fatalf("%s: output holds the password (as %q):\n%s", what, f, out)
		}
	}
	unescaped := func(s string) string { return strings.ReplaceAll(s, `\`, "") }
	if strings.Contains(unescaped(out), unescaped(password)) || strings.Contains(unescaped(percentDecode(out)), unescaped(password)) {
		t.Fatalf("%s: output holds the password, escaped or percent encoded:\n%s", what, out)
	}
}

// percentDecode decodes every %XX of s, leaving any other % as it is.
func percentDecode(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '%' && i+2 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+3], 16, 8); err == nil {
				b.WriteByte(byte(v))
				i += 2
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// TestPasswordNeverPrinted runs every command against every way of
// failing to connect, with the password in every form pgx accepts, given
// as --database-url and as DATABASE_URL, with and without --json: no
// output holds the password.
func TestPasswordNeverPrinted(t *testing.T) {
	if testdb.Citus() {
		t.Skip("connection failures do not depend on the cluster")
	}
	srv := passwordServer(t)
	live, err := pgconn.ParseConfig(testdb.NewURL(t))
	if err != nil {
		t.Fatal(err)
	}
	_, refusedPort := unreachableURL(t)
	paths := []failurePath{
		{"refused connection", "127.0.0.1", strconv.Itoa(refusedPort), "runledger", "postgres", "cannot reach database"},
		{"unknown host", "no-such-host.invalid", "5432", "runledger", "postgres", "no-such-host.invalid"},
		{"unknown database", live.Host, strconv.Itoa(int(live.Port)), "no_such_database_x", "postgres", "does not exist"},
		{"bad port", "127.0.0.1", "99999", "runledger", "postgres", "invalid database URL"},
		{"failed login", "127.0.0.1", strconv.Itoa(srv.Port()), "postgres", "app_user", "password authentication failed"},
	}
	ctx := testdb.Context(t)
	t.Setenv("PGPASSFILE", filepath.Join(t.TempDir(), "none"))
	runs := 0
	for _, form := range dsnForms {
		for _, path := range paths {
			dsn := form.build(path.host, path.port, path.db, path.user, form.password)
			pw := ""
			if form.env {
				pw = form.password
			}
			t.Setenv("PGPASSWORD", pw)
			if cfg, err := pgconn.ParseConfig(dsn); err == nil && cfg.Password != form.password {
				t.Fatalf("%s: pgx reads password %q from %q, want %q", form.name, cfg.Password, dsn, form.password)
			}
			for i, cmdArgs := range secretCommands {
				asJSON := (i+len(path.name))%2 == 0
				viaFlag := (i+len(form.name))%2 == 0
				args := append([]string(nil), cmdArgs...)
				if asJSON {
					args = append(args, "--json")
				}
				env := ""
				if viaFlag {
					args = append(args, "--database-url", dsn)
				} else {
					env = dsn
				}
				getenv := func(k string) string {
					if k == "DATABASE_URL" {
						return env
					}
					return os.Getenv(k)
				}
				var stdout, stderr syncBuffer
				code := run(ctx, args, &stdout, &stderr, getenv)
				runs++
				what := fmt.Sprintf("%s, %s, %s (json %v, flag %v)", form.name, path.name, strings.Join(cmdArgs, " "), asJSON, viaFlag)
				out := stdout.String() + stderr.String()
				if code == exitOK {
					t.Fatalf("%s: exit 0, want a failure\n%s", what, out)
				}
				if !strings.Contains(out, path.wantText) && !(path.name == "bad port" && form.env) {
					t.Errorf("%s: exit %d, output does not say %q:\n%s", what, code, path.wantText, out)
				}
				wantNoPassword(t, what, out, form.password)
			}
		}
	}
	t.Logf("%d runs", runs)
}

// TestInterruptedBulkActionHidesThePassword interrupts replay-bulk after
// its first chunk's statements, with the password in every form: the
// "to resume, run ..." line names the command without it.
func TestInterruptedBulkActionHidesThePassword(t *testing.T) {
	t.Setenv("PGPASSFILE", filepath.Join(t.TempDir(), "none"))
	for i, form := range dsnForms {
		t.Run(form.name, func(t *testing.T) {
			live, err := pgconn.ParseConfig(testdb.NewURL(t))
			if err != nil {
				t.Fatal(err)
			}
			// The test server trusts every login: any password connects.
			dsn := form.build(live.Host, strconv.Itoa(int(live.Port)), live.Database, live.User, form.password)
			pool := testdb.OpenPool(t, dsn, 2, nil)
			seedEmail(t, pool, 3)
			pw := ""
			if form.env {
				pw = form.password
			}
			t.Setenv("PGPASSWORD", pw)
			sigs := fakeSignals(t)
			base, cancel := context.WithCancel(context.WithValue(testdb.Context(t), interruptMarker{}, true))
			defer cancel()
			mine := func(ctx context.Context) bool { return ctx.Value(interruptMarker{}) != nil }
			var stdout, stderr syncBuffer
			defer failpoint.EnableFor(txn.FailpointBeforeCommit, func(ctx context.Context, arg any) {
				if !mine(ctx) || !strings.Contains(arg.(txn.FailpointCall).Op, "bulk") {
					return
				}
				cancel()
				sigs <- os.Interrupt
				testdb.WaitFor(t, "the interrupt's notice", func() bool {
					return strings.Contains(stderr.String(), "interrupted: the current chunk finishes and commits")
				})
			}, mine)()
			args := []string{"replay-bulk", "--type", "email", "--key", "k", "--reason", "r", "--chunk", "1"}
			// The flag, which the resume line repeats; DATABASE_URL it
			// does not (the first form gives it both ways).
			args = append(args, "--database-url", dsn)
			env := ""
			if i == 0 {
				env = dsn
			}
			getenv := func(k string) string {
				if k == "DATABASE_URL" {
					return env
				}
				return os.Getenv(k)
			}
			code := run(base, args, &stdout, &stderr, getenv)
			out := stdout.String() + stderr.String()
			if code != exitError || !strings.Contains(out, "to resume, run the same command") {
				t.Fatalf("exit %d, want 1 with a resume line:\n%s", code, out)
			}
			wantNoPassword(t, form.name, out, form.password)
		})
	}
}

// FuzzPasswordNeverPrinted: for any connection string pgx accepts with a
// password P of at least 4 bytes that is not part of the command's fixed
// text, no output of a failing command holds P. The context is cancelled
// before the run, so every connection attempt fails at once, without the
// network; the connection string comes by flag, by DATABASE_URL and, for
// --json, both.
func FuzzPasswordNeverPrinted(f *testing.F) {
	for _, form := range dsnForms {
		if !form.env {
			f.Add(form.build("127.0.0.1", "1", "d", "u", form.password))
			f.Add(form.build("h.invalid", "99999", "d", "u", form.password))
		}
	}
	f.Add(`host=/tmp password=' s p \\a\'ce ' user=x`)
	f.Add("postgres://u:pw%2Fpw@[::1]:5/d?password=longer-pw&target_session_attrs=bogus")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	noEnv := func(string) string { return "" }
	var fixed strings.Builder
	for _, args := range [][]string{{"stats", "--database-url", "postgres://u@127.0.0.1:1/d"}, {"--json", "stats", "--database-url", "postgres://u@h:99999/d"}} {
		var o, e syncBuffer
		run(ctx, args, &o, &e, noEnv)
		fixed.WriteString(o.String() + e.String() + " 127.0.0.1 5432 xxxxx interrupted")
	}
	f.Fuzz(func(t *testing.T, dsn string) {
		cfg, err := pgconn.ParseConfig(dsn)
		if err != nil || len(cfg.Password) < 4 || strings.Contains(fixed.String(), cfg.Password) || strings.ContainsAny(dsn, "\x00") {
			return
		}
		p := cfg.Password
		for _, args := range [][]string{
			{"stats", "--database-url", dsn},
			{"--json", "enqueue", "--type", "t", "--database-url=" + dsn},
			{"replay-bulk", "--type", "t", "--key", "k", "--reason", "r"},
		} {
			getenv := func(k string) string {
				if k == "DATABASE_URL" {
					return dsn
				}
				return ""
			}
			var o, e syncBuffer
			run(ctx, args, &o, &e, getenv)
			// The masks are taken out first: a password of the mask's
			// letters is found in a mask and the letter after it, without
			// any leak.
			if out := o.String() + e.String(); strings.Contains(strings.ReplaceAll(out, redact.Mask, "\uFFFD"), p) {
				t.Fatalf("runledger %q: output holds password %q:\n%s", args, p, out)
			}
		}
	})
}
