package console

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"net/http"
	"strings"
)

// cookieName is the session cookie a token login sets.
const cookieName = "runledger_console"

// TokenOperator is the operator name recorded for actions taken by a
// request that authenticated with the token.
const TokenOperator = "token"

// NewToken returns a fresh login token: 32 random bytes, hex.
func NewToken() (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return hex.EncodeToString(b[:]), nil
}

// sessionValue is the cookie value a login with token sets: derived from
// the token, so the cookie never holds the token itself, and every
// session ends when the process (and its token) does.
func sessionValue(token string) string {
	sum := sha256.Sum256([]byte("runledger console session\x00" + token))
	return hex.EncodeToString(sum[:])
}

// equal compares secrets in constant time.
func equal(a, b string) bool { return subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1 }

type operatorKey struct{}

// operatorOf is the authenticated operator of a request that passed one
// of the wrappers below.
func operatorOf(ctx context.Context) string {
	name, _ := ctx.Value(operatorKey{}).(string)
	return name
}

// authenticate returns the request's operator: the application's, or
// TokenOperator for a bearer token or a session cookie.
func (c *console) authenticate(r *http.Request) (string, bool) {
	if c.opts.Operator != nil {
		if name, ok := c.opts.Operator(r); ok {
			if name == "" {
				name = "unnamed"
			}
			return name, true
		}
	}
	if c.opts.Token == "" {
		return "", false
	}
	if auth := r.Header.Get("Authorization"); auth != "" {
		scheme, token, found := strings.Cut(auth, " ")
		if found && strings.EqualFold(scheme, "Bearer") && equal(strings.TrimSpace(token), c.opts.Token) {
			return TokenOperator, true
		}
	}
	if ck, err := r.Cookie(cookieName); err == nil && equal(ck.Value, c.session) {
		return TokenOperator, true
	}
	return "", false
}

// page wraps a page: an unauthenticated request is sent to the login page.
func (c *console) page(h http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name, ok := c.authenticate(r)
		if !ok {
			http.Redirect(w, r, c.link("/login"), http.StatusSeeOther)
			return
		}
		h(w, r.WithContext(context.WithValue(r.Context(), operatorKey{}, name)))
	})
}

// api wraps a machine route: an unauthenticated request gets 401.
func (c *console) api(h http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name, ok := c.authenticate(r)
		if !ok {
			w.Header().Set("WWW-Authenticate", `Bearer realm="runledger console"`)
			http.Error(w, "authentication required", http.StatusUnauthorized)
			return
		}
		h(w, r.WithContext(context.WithValue(r.Context(), operatorKey{}, name)))
	})
}

// action wraps a state-changing route: 401 without authentication, 403 in
// read-only mode (whatever the request holds), then the action. The
// cross-origin protection around every route has already refused a
// cross-origin POST.
func (c *console) action(h http.HandlerFunc) http.Handler {
	return c.api(func(w http.ResponseWriter, r *http.Request) {
		if c.opts.ReadOnly {
			http.Error(w, "the console is read-only: actions are refused", http.StatusForbidden)
			return
		}
		h(w, r)
	})
}

// login exchanges a token for the session cookie and redirects to the
// overview. Without a token (or with a wrong one) it shows the login page:
// 401, with a form asking for the token when token login is on.
func (c *console) login(w http.ResponseWriter, r *http.Request) {
	token := r.URL.Query().Get("token")
	if c.opts.Token != "" && token != "" && equal(token, c.opts.Token) {
		http.SetCookie(w, &http.Cookie{
			Name: cookieName, Value: c.session, Path: c.link("/"),
			HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil,
		})
		http.Redirect(w, r, c.link("/"), http.StatusSeeOther)
		return
	}
	if _, ok := c.authenticate(r); ok && token == "" {
		http.Redirect(w, r, c.link("/"), http.StatusSeeOther)
		return
	}
	c.render(w, r, http.StatusUnauthorized, "login", loginView{
		TokenLogin: c.opts.Token != "",
		Refused:    token != "",
	})
}

type loginView struct {
	TokenLogin bool
	Refused    bool
}
