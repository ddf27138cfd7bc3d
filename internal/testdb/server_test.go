package testdb

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/runledger-go/runledger/internal/pgserver"
)

func TestChooseServer(t *testing.T) {
	t.Parallel()
	errDocker := errors.New("docker: no daemon")
	errLocal := errors.New("no binaries")
	cases := []struct {
		name          string
		url           string
		docker, local error
		want          string
		wantDocker    int // probes expected to run
		wantLocal     int
	}{
		{"url wins over everything", "postgres://x", nil, nil, kindURL, 0, 0},
		{"docker when it answers", "", nil, nil, kindDocker, 1, 0},
		{"local when docker does not answer", "", errDocker, nil, kindLocal, 1, 1},
		{"nothing", "", errDocker, errLocal, "", 1, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var dockerCalls, localCalls int
			got, err := chooseServer(
				func(k string) string {
					if k == EnvURL {
						return c.url
					}
					return ""
				},
				func() error { dockerCalls++; return c.docker },
				func() error { localCalls++; return c.local },
			)
			if got != c.want {
				t.Errorf("kind = %q, want %q", got, c.want)
			}
			if (err != nil) != (c.want == "") {
				t.Errorf("err = %v", err)
			}
			if dockerCalls != c.wantDocker || localCalls != c.wantLocal {
				t.Errorf("probes run: docker %d, local %d; want %d, %d", dockerCalls, localCalls, c.wantDocker, c.wantLocal)
			}
		})
	}
}

// TestChooseCitus checks that the Citus lane is chosen before any probe
// runs, and that it refuses a configured URL and values other than 0 and 1.
func TestChooseCitus(t *testing.T) {
	t.Parallel()
	cases := []struct {
		citus, url string
		want       string
		wantErr    string
	}{
		{"1", "", kindCitus, ""},
		{"1", "postgres://x", "", EnvURL},
		{"yes", "", "", "want 1"},
		{"0", "postgres://x", kindURL, ""},
	}
	for _, c := range cases {
		env := map[string]string{EnvCitus: c.citus, EnvURL: c.url}
		probes := 0
		got, err := chooseServer(func(k string) string { return env[k] },
			func() error { probes++; return nil },
			func() error { probes++; return nil })
		if got != c.want || (err == nil) != (c.wantErr == "") || (err != nil && !strings.Contains(err.Error(), c.wantErr)) {
			t.Errorf("%s=%q %s=%q: chose %q, %v; want %q, an error mentioning %q", EnvCitus, c.citus, EnvURL, c.url, got, err, c.want, c.wantErr)
		}
		if probes != 0 {
			t.Errorf("%s=%q: %d probes ran, want none", EnvCitus, c.citus, probes)
		}
	}
}

// TestNoServerMessage checks that the failure names every way out.
func TestNoServerMessage(t *testing.T) {
	t.Parallel()
	_, err := chooseServer(func(string) string { return "" },
		func() error { return errors.New("dial unix /var/run/docker.sock: connect: no such file or directory") },
		func() error { _, err := pgserver.FindBinDir(t.TempDir()); return err })
	if !errors.Is(err, errNoServer) {
		t.Fatalf("err = %v, want errNoServer", err)
	}
	for _, want := range []string{EnvURL, "Docker", "docker.sock", "apt-get install postgresql", "initdb"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("message does not mention %q:\n%v", want, err)
		}
	}
}

// TestChooseServerObservedHere runs the real probes on this machine. Where
// no Docker daemon answers (the development machine this was written on has
// the CLI but no daemon), the choice must fall through to local binaries.
func TestChooseServerObservedHere(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, dockerErr := dockerPing(ctx)
	_, localErr := pgserver.FindBinDir("")
	t.Logf("docker ping: %v; local binaries: %v", dockerErr, localErr)
	kind, err := chooseServer(func(string) string { return "" },
		func() error { _, err := dockerPing(ctx); return err },
		func() error { _, err := pgserver.FindBinDir(""); return err })
	switch {
	case dockerErr == nil:
		if kind != kindDocker {
			t.Errorf("docker answered, but chose %q (%v)", kind, err)
		}
	case localErr == nil:
		if kind != kindLocal {
			t.Errorf("docker unavailable (%v) and binaries present, but chose %q (%v)", dockerErr, kind, err)
		}
	default:
		if !errors.Is(err, errNoServer) {
			t.Errorf("nothing available, but chose %q (%v)", kind, err)
		}
	}

	// The server this binary actually uses is the one chosen (or the URL,
	// or the Citus lane's cluster).
	if os.Getenv(EnvURL) != "" {
		kind = kindURL
	}
	if os.Getenv(EnvCitus) == "1" {
		kind = kindCitus
	}
	AdminURL(t) // sets the server up if no test has yet
	state.mu.Lock()
	got := state.srv.kind
	state.mu.Unlock()
	if got != kind {
		t.Errorf("server in use is %q, want %q", got, kind)
	}
}

func TestWithDatabase(t *testing.T) {
	t.Parallel()
	cases := []struct{ in, want string }{
		{"postgres://u:p@h:5432/postgres?sslmode=disable", "postgres://u:p@h:5432/rl_test_x?sslmode=disable"},
		{"postgresql://h/", "postgresql://h/rl_test_x"},
		{"host=h user=u dbname=postgres", "host=h user=u dbname=postgres dbname='rl_test_x'"},
	}
	for _, c := range cases {
		got, err := withDatabase(c.in, "rl_test_x")
		if err != nil || got != c.want {
			t.Errorf("withDatabase(%q) = %q, %v; want %q", c.in, got, err, c.want)
			continue
		}
		cfg, err := pgx.ParseConfig(got)
		if err != nil || cfg.Database != "rl_test_x" {
			t.Errorf("%q parses to database %q (%v)", got, cfg.Database, err)
		}
	}
}
