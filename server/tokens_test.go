package server

import (
	"context"
	"encoding/json"
	"net/netip"
	"net/url"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	pb "github.com/trellis-dev/trellis/internal/gen/trellis/worker/v1"

	"github.com/trellis-dev/trellis"
	"github.com/trellis-dev/trellis/internal/auth"
	"github.com/trellis-dev/trellis/internal/auth/storeauth"
	"github.com/trellis-dev/trellis/store"
)

// newTokenEnv is a server whose store's tokens authenticate (storeauth, with
// its default cache), and the secret of its bootstrap admin.
func newTokenEnv(t *testing.T, url string) (*env, string) {
	t.Helper()
	e := newEnv(t, url, func(c *Config) { c.Authenticator = storeauth.New(c.Backend, storeauth.Config{}) })
	root, err := e.srv.BootstrapAdmin(context.Background())
	if err != nil || root == "" {
		t.Fatalf("bootstrap: %q %v", root, err)
	}
	return e, root
}

// The life of a token through the API: created with a TTL, its fields in JSON,
// its use recorded, rotated with a grace (both secrets work) and without one
// (the old stops at once), revoked (refused at once on this server although
// its cache lasts 0.5 s), and a revoked token refused a rotation.
func TestAPITokenLifecycle(t *testing.T) {
	for name, url := range storeURLs(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e, root := newTokenEnv(t, url(t))
			grants := []map[string]any{{"role": "reader", "namespace": "default"}}
			r := e.do("POST", "/v1/tokens", root, map[string]any{"name": "ci", "grants": grants, "ttl": "720h"}).want(t, 201)
			var raw struct {
				Token  map[string]json.RawMessage `json:"token"`
				Secret string                     `json:"secret"`
			}
			r.decode(t, &raw)
			if string(raw.Token["last_used_at"]) != "null" || raw.Token["expires_at"] == nil {
				t.Fatalf("a new token's JSON %s: want expires_at set and last_used_at null", r.body)
			}
			var created CreatedToken
			r.decode(t, &created)
			if d := created.Token.ExpiresAt.Sub(created.Token.CreatedAt); d != 720*time.Hour {
				t.Errorf("expires_at - created_at = %s, want 720h", d)
			}
			old := created.Secret
			e.do("GET", "/v1/namespaces/default/runs", old, nil).want(t, 200)
			if tok := tokenNamed(t, e, root, "ci"); tok.LastUsedAt == nil {
				t.Errorf("last_used_at after a request: nil")
			}

			var rotated CreatedToken
			r = e.do("POST", "/v1/tokens/ci/rotate", root, nil).want(t, 200)
			r.decode(t, &rotated)
			if !auth.LooksLikeToken(rotated.Secret) || rotated.Secret == old || r.header.Get("Cache-Control") != "no-store" ||
				rotated.Token.RotatedAt == nil || rotated.Token.PreviousExpiresAt == nil {
				t.Fatalf("rotated %+v (%s)", rotated, r.header)
			}
			if d := rotated.Token.PreviousExpiresAt.Sub(*rotated.Token.RotatedAt); d != store.DefaultTokenGrace {
				t.Errorf("default grace = %s, want %s", d, store.DefaultTokenGrace)
			}
			e.do("GET", "/v1/namespaces/default/runs", old, nil).want(t, 200)
			e.do("GET", "/v1/namespaces/default/runs", rotated.Secret, nil).want(t, 200)
			if list := e.do("GET", "/v1/tokens", root, nil).want(t, 200); strings.Contains(string(list.body), rotated.Secret) {
				t.Fatal("the list shows a secret")
			}

			var again CreatedToken
			e.do("POST", "/v1/tokens/ci/rotate", root, map[string]any{"grace": "0s"}).want(t, 200).decode(t, &again)
			for _, s := range []string{old, rotated.Secret} {
				e.do("GET", "/v1/namespaces/default/runs", s, nil).problem(t, 401, "unauthenticated")
			}
			e.do("GET", "/v1/namespaces/default/runs", again.Secret, nil).want(t, 200)

			e.do("POST", "/v1/tokens/ci/revoke", root, nil).want(t, 200)
			e.do("GET", "/v1/namespaces/default/runs", again.Secret, nil).problem(t, 401, "unauthenticated")
			e.do("POST", "/v1/tokens/ci/rotate", root, nil).problem(t, 409, "token_inactive")
			e.do("GET", "/v1/namespaces/default/runs", again.Secret, nil).problem(t, 401, "unauthenticated")
		})
	}
}

// tokenNamed reads one token from the list.
func tokenNamed(t *testing.T, e *env, admin, name string) *store.Token {
	t.Helper()
	var tl TokenList
	e.do("GET", "/v1/tokens", admin, nil).want(t, 200).decode(t, &tl)
	for _, tok := range tl.Tokens {
		if tok.Name == name {
			return tok
		}
	}
	t.Fatalf("no token %s in %+v", name, tl.Tokens)
	return nil
}

// Bad token requests are refused with a clear error and change nothing.
func TestAPITokenBadRequests(t *testing.T) {
	t.Parallel()
	e, root := newTokenEnv(t, storeURLs(t)["sqlite"](t))
	grants := []map[string]any{{"role": "reader", "namespace": "default"}}
	e.do("POST", "/v1/tokens", root, map[string]any{"name": "ci", "grants": grants}).want(t, 201)
	before := tokensOf(t, e)
	for _, c := range []struct {
		name, path, body string
		status           int
		code             string
	}{
		{"ttl not a duration", "/v1/tokens", `{"name":"x","grants":[{"role":"reader","namespace":"*"}],"ttl":"soon"}`, 400, "invalid_argument"},
		{"ttl negative", "/v1/tokens", `{"name":"x","grants":[{"role":"reader","namespace":"*"}],"ttl":"-1h"}`, 400, "invalid_argument"},
		{"ttl under a second", "/v1/tokens", `{"name":"x","grants":[{"role":"reader","namespace":"*"}],"ttl":"10ms"}`, 400, "invalid_argument"},
		{"subject malformed", "/v1/tokens", `{"name":"x","grants":[{"role":"reader","namespace":"*"}],"subject":"w1"}`, 400, "invalid_argument"},
		{"grace not a duration", "/v1/tokens/ci/rotate", `{"grace":"later"}`, 400, "invalid_argument"},
		{"grace negative", "/v1/tokens/ci/rotate", `{"grace":"-1s"}`, 400, "invalid_argument"},
		{"rotate unknown field", "/v1/tokens/ci/rotate", `{"ttl":"1h"}`, 400, "invalid_argument"},
		{"rotate unknown token", "/v1/tokens/nobody/rotate", ``, 404, "token_not_found"},
		{"rotate malformed name", "/v1/tokens/a%20b/rotate", ``, 400, "invalid_argument"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var body any
			if c.body != "" {
				body = c.body
			}
			e.do("POST", c.path, root, body).problem(t, c.status, c.code)
		})
	}
	e.do("POST", "/v1/tokens/ci/rotate", "reader", nil).problem(t, 401, "unauthenticated") // the fixtures are not the store's
	var created CreatedToken
	e.do("POST", "/v1/tokens", root, map[string]any{"name": "ns-admin", "grants": []map[string]any{{"role": "admin", "namespace": "default"}}}).
		want(t, 201).decode(t, &created)
	e.do("POST", "/v1/tokens/ci/rotate", created.Secret, nil).problem(t, 403, "permission_denied")
	after := tokensOf(t, e)
	if len(after) != len(before)+1 || after[0].RotatedAt != nil || after[0].Name != "admin" || after[1].Name != "ci" || after[1].RotatedAt != nil {
		t.Fatalf("refused requests changed the tokens: %+v", after)
	}
}

// An expired token authenticates as an unknown one everywhere: the API, the
// web UI's sign-in and the worker protocol.
func TestExpiredTokenRefusedEverywhere(t *testing.T) {
	for name, storeURL := range storeURLs(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			u := storeURL(t)
			e, _ := newTokenEnv(t, u)
			// The token is created by a process whose clock is two hours behind:
			// its one hour TTL ended an hour ago.
			behind, err := trellis.OpenStore(context.Background(), u, func() time.Time { return time.Now().Add(-2 * time.Hour) })
			if err != nil {
				t.Fatal(err)
			}
			defer behind.Close()
			secret, hash, _ := auth.NewToken()
			grants := []auth.Grant{{Role: auth.RoleAdmin, Namespace: auth.AllNamespaces}}
			if _, err := behind.TokenCreate(context.Background(), &store.TokenCreateParams{Name: "old", Grants: grants, Hash: hash, TTL: time.Hour}); err != nil {
				t.Fatal(err)
			}
			e.do("GET", "/v1/namespaces/default/runs", secret, nil).problem(t, 401, "unauthenticated")
			e.do("GET", "/v1/tokens", secret, nil).problem(t, 401, "unauthenticated")
			if r := e.uiSession("").post("/ui/login", url.Values{"token": {secret}}, e.base); r.status != 401 {
				t.Errorf("UI sign-in with an expired token: %d, want 401", r.status)
			}
			_, err = e.workerClient(secret).ListWorkers(context.Background(), connect.NewRequest(&pb.ListWorkersRequest{Namespace: "default"}))
			if connect.CodeOf(err) != connect.CodeUnauthenticated {
				t.Errorf("worker protocol with an expired token: %v, want unauthenticated", err)
			}
		})
	}
}

// A rotation is audited (token.rotate, its grace, never a secret), and behind
// a trusted proxy the entry's source is the client's address the proxy
// forwarded, not the proxy's; from an untrusted peer the header is ignored.
func TestAuditRotationAndProxySource(t *testing.T) {
	t.Parallel()
	e := newEnv(t, storeURLs(t)["sqlite"](t), func(c *Config) {
		c.Authenticator = storeauth.New(c.Backend, storeauth.Config{})
		c.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}
	})
	root, err := e.srv.BootstrapAdmin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	created := e.do("POST", "/v1/tokens", root, map[string]any{"name": "ci", "ttl": "720h", "subject": "CN=ci",
		"grants": []map[string]any{{"role": "reader", "namespace": "default"}}}, "X-Forwarded-For", "203.0.113.9, 198.51.100.7").want(t, 201)
	rotated := e.do("POST", "/v1/tokens/ci/rotate", root, map[string]any{"grace": "10m"}).want(t, 200)
	var secret CreatedToken
	rotated.decode(t, &secret)
	log := e.auditLog()
	c, r := log[created.header.Get(RequestIDHeader)], log[rotated.header.Get(RequestIDHeader)]
	if c == nil || c.Action != "token.create" || c.Source != "198.51.100.7" || c.Detail != "grants reader:default; ttl 720h0m0s; subject CN=ci" {
		t.Errorf("the create's entry: %+v; want source 198.51.100.7 (forwarded by a trusted proxy) and its grants, TTL and subject", c)
	}
	if r == nil || r.Action != "token.rotate" || r.Target.ID != "ci" || r.Detail != "grace 10m0s" || r.Outcome != "ok" || r.Source != "127.0.0.1" {
		t.Errorf("the rotation's entry: %+v", r)
	}
	for _, en := range log {
		if strings.Contains(en.Detail, secret.Secret) || strings.Contains(en.Detail, "trl_") {
			t.Errorf("an audit entry holds a secret: %+v", en)
		}
	}
}
