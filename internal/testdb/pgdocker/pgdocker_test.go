package pgdocker

import "testing"

func TestSplitImage(t *testing.T) {
	cases := []struct{ in, repo, tag string }{
		{"postgres:15", "postgres", "15"},
		{"postgres", "postgres", "latest"},
		{"registry:5000/postgres", "registry:5000/postgres", "latest"},
		{"registry:5000/pg/postgres:16-alpine", "registry:5000/pg/postgres", "16-alpine"},
	}
	for _, c := range cases {
		if repo, tag := SplitImage(c.in); repo != c.repo || tag != c.tag {
			t.Errorf("SplitImage(%q) = %q, %q", c.in, repo, tag)
		}
	}
}

func TestHostPort(t *testing.T) {
	t.Setenv("DOCKER_HOST", "")
	if got := hostPort("localhost:5432"); got != "127.0.0.1:5432" {
		t.Errorf("local daemon: %s", got)
	}
	if got := hostPort("10.0.0.5:5432"); got != "10.0.0.5:5432" {
		t.Errorf("explicit host: %s", got)
	}
	t.Setenv("DOCKER_HOST", "tcp://docker.internal:2376")
	if got := hostPort("localhost:5432"); got != "docker.internal:5432" {
		t.Errorf("remote daemon: %s", got)
	}
}
