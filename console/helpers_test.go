package console_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/console"
	"github.com/runledger-go/runledger/internal/testdb"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// testToken is the login token of the consoles the tests start.
const testToken = "test-token-0123456789abcdef0123456789abcdef"

// fixture is a database with jobs of two tenants, and the console's
// options for it.
type fixture struct {
	pool       *pgxpool.Pool
	orgA, orgB uuid.UUID
	succeededA uuid.UUID // SUCCEEDED "email" job of orgA, run 1
	deadA      uuid.UUID // DEAD_LETTERED "charge" job of orgA, run 1, error smtp.down
	succeededB uuid.UUID // SUCCEEDED "email" job of orgB
	scriptA    uuid.UUID // SUCCEEDED "email" job of orgA whose payload holds a <script> tag
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	pool := testdb.New(t)
	f := &fixture{pool: pool, orgA: uuid.Must(uuid.NewV7()), orgB: uuid.Must(uuid.NewV7())}
	a, b := runledger.Organization(f.orgA), runledger.Organization(f.orgB)
	f.succeededA = testdb.Seed(t, pool, testdb.Succeeded(a))
	f.succeededB = testdb.Seed(t, pool, testdb.Succeeded(b))
	dead := testdb.Succeeded(a)
	dead.JobType, dead.Status = "charge", "DEAD_LETTERED"
	f.deadA = testdb.Seed(t, pool, dead)
	testdb.Exec(t, pool, `UPDATE job_queue SET last_error_code = 'smtp.down', output = NULL WHERE id = $1`, f.deadA)
	script := testdb.Succeeded(a)
	script.Payload = `{"note":"<script>alert(1)</script>"}`
	f.scriptA = testdb.Seed(t, pool, script)
	return f
}

// server starts a console with opts (the token login when opts sets no
// authentication) and returns its address.
func (f *fixture) server(t *testing.T, opts console.Options) *httptest.Server {
	t.Helper()
	if opts.Operator == nil && opts.Token == "" {
		opts.Token = testToken
	}
	h, err := console.New(f.pool, opts)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

// client never follows redirects, so tests see them.
var client = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

// do sends a request with the bearer token when bearer is set; form, when
// not nil, is sent as a same-origin POST.
func do(t *testing.T, srv *httptest.Server, method, path string, bearer bool, form map[string]string, hdr map[string]string) (*http.Response, string) {
	t.Helper()
	var body io.Reader
	if form != nil {
		v := make([]string, 0, len(form))
		for k, x := range form {
			v = append(v, k+"="+urlEscape(x))
		}
		body = strings.NewReader(strings.Join(v, "&"))
	}
	req, err := http.NewRequestWithContext(context.Background(), method, srv.URL+path, body)
	if err != nil {
		t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	if bearer {
		req.Header.Set("Authorization", "Bearer "+testToken)
	}
	for k, x := range hdr {
		req.Header.Set(k, x)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b)
}

func urlEscape(s string) string {
	r := strings.NewReplacer("%", "%25", "&", "%26", "=", "%3D", "+", "%2B", " ", "+", "<", "%3C", ">", "%3E")
	return r.Replace(s)
}

func wantCode(t *testing.T, resp *http.Response, body string, code int) {
	t.Helper()
	if resp.StatusCode != code {
		t.Fatalf("%s %s: status %d, want %d; body: %.400s", resp.Request.Method, resp.Request.URL.Path, resp.StatusCode, code, body)
	}
}
