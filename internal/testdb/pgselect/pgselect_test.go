package pgselect

import (
	"errors"
	"strings"
	"testing"
)

func TestChoose(t *testing.T) {
	errDocker := errors.New("docker: no daemon")
	errLocal := errors.New("no binaries")
	cases := []struct {
		name          string
		url           bool
		binDir        string
		docker, local error
		want          Source
		wantDocker    int // probes expected to run
		wantLocal     int
	}{
		{"url wins over everything", true, "/x/bin", nil, nil, SourceURL, 0, 0},
		{"named binaries win over docker", false, "/x/bin", nil, nil, SourceLocal, 0, 0},
		{"named binaries are not probed", false, "/x/bin", errDocker, errLocal, SourceLocal, 0, 0},
		{"docker when it answers", false, "", nil, nil, SourceDocker, 1, 0},
		{"local when docker does not answer", false, "", errDocker, nil, SourceLocal, 1, 1},
		{"nothing", false, "", errDocker, errLocal, "", 1, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var dockerCalls, localCalls int
			got, err := Choose(Probes{
				URL:    c.url,
				BinDir: c.binDir,
				Docker: func() error { dockerCalls++; return c.docker },
				Local:  func() error { localCalls++; return c.local },
			})
			if got != c.want {
				t.Errorf("source = %q, want %q", got, c.want)
			}
			if (err != nil) != (c.want == "") {
				t.Errorf("err = %v", err)
			}
			if dockerCalls != c.wantDocker || localCalls != c.wantLocal {
				t.Errorf("probes run: docker %d, local %d; want %d, %d", dockerCalls, localCalls, c.wantDocker, c.wantLocal)
			}
			if c.want != "" {
				return
			}
			var nse *NoServerError
			if !errors.Is(err, ErrNoServer) || !errors.As(err, &nse) {
				t.Fatalf("err = %v, want a *NoServerError matching ErrNoServer", err)
			}
			if nse.Docker != errDocker || nse.Local != errLocal {
				t.Errorf("reasons = %v, %v", nse.Docker, nse.Local)
			}
			for _, want := range []string{"docker: no daemon", "no binaries"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("message %q does not mention %q", err, want)
				}
			}
		})
	}
}
