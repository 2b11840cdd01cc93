package storetest

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/trellis-dev/trellis/internal/auth"
	"github.com/trellis-dev/trellis/store"
)

var tokenCases = []testCase{
	{"CreateAndFindByHash", tokenCreateAndFind},
	{"DuplicateName", tokenDuplicateName},
	{"UnknownHash", tokenUnknownHash},
	{"RevokedNotFound", tokenRevokedNotFound},
	{"RevokeUnknown", tokenRevokeUnknown},
	{"ListByName", tokenListByName},
	{"InvalidParams", tokenInvalidParams},
}

// tokenParams returns the parameters of a token named name with a fresh hash.
func (e *env) tokenParams(name string, grants ...auth.Grant) (*store.TokenCreateParams, string) {
	e.t.Helper()
	secret, hash, err := auth.NewToken()
	if err != nil {
		e.t.Fatal(err)
	}
	if len(grants) == 0 {
		grants = []auth.Grant{{Role: auth.RoleReader, Namespace: ns}}
	}
	return &store.TokenCreateParams{Name: name, Grants: grants, Hash: hash}, secret
}

// createToken creates a token and returns its secret.
func (e *env) createToken(name string, grants ...auth.Grant) string {
	e.t.Helper()
	p, secret := e.tokenParams(name, grants...)
	if _, err := e.st.TokenCreate(e.ctx, p); err != nil {
		e.t.Fatalf("TokenCreate(%s): %v", name, err)
	}
	return secret
}

func (e *env) tokenByHash(secret string) (*store.Token, error) {
	return e.st.TokenByHash(e.ctx, &store.TokenByHashParams{Hash: auth.HashToken(secret)})
}

func tokenCreateAndFind(t *testing.T, e *env) {
	grants := []auth.Grant{
		{Role: auth.RoleProducer, Namespace: "shop", Queue: "emails"},
		{Role: auth.RoleAdmin, Namespace: auth.AllNamespaces},
	}
	p, secret := e.tokenParams("ci", grants...)
	created, err := e.st.TokenCreate(e.ctx, p)
	if err != nil {
		t.Fatalf("TokenCreate: %v", err)
	}
	got, err := e.tokenByHash(secret)
	if err != nil {
		t.Fatalf("TokenByHash: %v", err)
	}
	for _, tok := range []*store.Token{created, got} {
		if tok.Name != "ci" || !slices.Equal(tok.Grants, grants) || tok.RevokedAt != nil {
			t.Errorf("token = %+v, want ci with %v, live", tok, grants)
		}
		if d := tok.CreatedAt.Sub(e.clk.Now()).Abs(); d > timeTolerance {
			t.Errorf("CreatedAt = %v, want %v", tok.CreatedAt, e.clk.Now())
		}
	}
	if !got.Principal().Allows(auth.RoleReader, "anything", "") {
		t.Error("the principal of an admin on * may not read")
	}
}

func tokenDuplicateName(t *testing.T, e *env) {
	e.createToken("ci")
	p, secret := e.tokenParams("ci", auth.Grant{Role: auth.RoleAdmin, Namespace: auth.AllNamespaces})
	if _, err := e.st.TokenCreate(e.ctx, p); !errors.Is(err, store.ErrTokenExists) {
		t.Fatalf("second TokenCreate(ci) = %v, want ErrTokenExists", err)
	}
	if _, err := e.tokenByHash(secret); !errors.Is(err, store.ErrTokenNotFound) {
		t.Errorf("TokenByHash of the rejected token = %v, want ErrTokenNotFound", err)
	}
	e.revokeToken("ci")
	if _, err := e.st.TokenCreate(e.ctx, p); !errors.Is(err, store.ErrTokenExists) {
		t.Errorf("TokenCreate(ci) after revoking ci = %v, want ErrTokenExists (names are never reused)", err)
	}
}

func tokenUnknownHash(t *testing.T, e *env) {
	e.createToken("ci")
	if _, err := e.tokenByHash("trl_unknown"); !errors.Is(err, store.ErrTokenNotFound) {
		t.Errorf("TokenByHash(unknown) = %v, want ErrTokenNotFound", err)
	}
}

func (e *env) revokeToken(name string) *store.Token {
	e.t.Helper()
	tok, err := e.st.TokenRevoke(e.ctx, &store.TokenRevokeParams{Name: name})
	if err != nil {
		e.t.Fatalf("TokenRevoke(%s): %v", name, err)
	}
	return tok
}

func tokenRevokedNotFound(t *testing.T, e *env) {
	secret := e.createToken("ci")
	other := e.createToken("other")
	e.clk.Advance(time.Second)
	revokedAt := e.clk.Now()
	tok := e.revokeToken("ci")
	if tok.RevokedAt == nil || tok.RevokedAt.Sub(revokedAt).Abs() > timeTolerance {
		t.Errorf("RevokedAt = %v, want %v", tok.RevokedAt, revokedAt)
	}
	if _, err := e.tokenByHash(secret); !errors.Is(err, store.ErrTokenNotFound) {
		t.Errorf("TokenByHash(revoked) = %v, want ErrTokenNotFound", err)
	}
	if _, err := e.tokenByHash(other); err != nil {
		t.Errorf("TokenByHash(other) after revoking ci: %v", err)
	}
	e.clk.Advance(time.Second)
	if again := e.revokeToken("ci"); again.RevokedAt == nil || again.RevokedAt.Sub(revokedAt).Abs() > timeTolerance {
		t.Errorf("revoking again: RevokedAt = %v, want the first revocation's %v", again.RevokedAt, revokedAt)
	}
}

func tokenRevokeUnknown(t *testing.T, e *env) {
	if _, err := e.st.TokenRevoke(e.ctx, &store.TokenRevokeParams{Name: "nobody"}); !errors.Is(err, store.ErrTokenNotFound) {
		t.Errorf("TokenRevoke(nobody) = %v, want ErrTokenNotFound", err)
	}
}

func tokenListByName(t *testing.T, e *env) {
	ts, err := e.st.TokenList(e.ctx)
	if err != nil || ts == nil || len(ts) != 0 {
		t.Fatalf("TokenList of an empty store = %v, %v; want an empty list", ts, err)
	}
	e.createToken("b")
	e.createToken("a", auth.Grant{Role: auth.RoleWorker, Namespace: ns, Queue: "q"})
	e.createToken("c")
	e.revokeToken("c")
	ts, err = e.st.TokenList(e.ctx)
	if err != nil {
		t.Fatalf("TokenList: %v", err)
	}
	var names []string
	for _, tok := range ts {
		names = append(names, tok.Name)
	}
	if !slices.Equal(names, []string{"a", "b", "c"}) {
		t.Fatalf("TokenList names = %v, want [a b c]", names)
	}
	if g := ts[0].Grants; len(g) != 1 || g[0].Queue != "q" || g[0].Role != auth.RoleWorker {
		t.Errorf("grants of a = %v, want worker on %s queue q", g, ns)
	}
	if ts[1].RevokedAt != nil || ts[2].RevokedAt == nil {
		t.Errorf("RevokedAt of b, c = %v, %v; want only c revoked", ts[1].RevokedAt, ts[2].RevokedAt)
	}
}

func tokenInvalidParams(t *testing.T, e *env) {
	admin := auth.Grant{Role: auth.RoleAdmin, Namespace: auth.AllNamespaces}
	for name, change := range map[string]func(p *store.TokenCreateParams){
		"empty name":      func(p *store.TokenCreateParams) { p.Name = "" },
		"name with space": func(p *store.TokenCreateParams) { p.Name = "a b" },
		"no grants":       func(p *store.TokenCreateParams) { p.Grants = nil },
		"invalid role":    func(p *store.TokenCreateParams) { p.Grants = []auth.Grant{admin, {Role: "root", Namespace: ns}} },
		"empty namespace": func(p *store.TokenCreateParams) { p.Grants = []auth.Grant{{Role: auth.RoleReader}} },
		"system namespace": func(p *store.TokenCreateParams) {
			p.Grants = []auth.Grant{{Role: auth.RoleAdmin, Namespace: auth.SystemNamespace}}
		},
		"short hash": func(p *store.TokenCreateParams) { p.Hash = p.Hash[:8] },
		// Names and grants by the one rule (store.ValidateTokenName, ValidateGrant).
		"name with a slash":      func(p *store.TokenCreateParams) { p.Name = "ci/deploy" },
		"name with a wildcard":   func(p *store.TokenCreateParams) { p.Name = "ci*" },
		"name with a control":    func(p *store.TokenCreateParams) { p.Name = "ci\x1b" },
		"name not UTF-8":         func(p *store.TokenCreateParams) { p.Name = "ci\xff" },
		"name ..":                func(p *store.TokenCreateParams) { p.Name = ".." },
		"namespace with a slash": func(p *store.TokenCreateParams) { p.Grants = []auth.Grant{{Role: auth.RoleReader, Namespace: "a/b"}} },
		"namespace pattern":      func(p *store.TokenCreateParams) { p.Grants = []auth.Grant{{Role: auth.RoleReader, Namespace: "ns*"}} },
		"namespace with a space": func(p *store.TokenCreateParams) { p.Grants = []auth.Grant{{Role: auth.RoleReader, Namespace: "a b"}} },
		"queue with a slash": func(p *store.TokenCreateParams) {
			p.Grants = []auth.Grant{{Role: auth.RoleWorker, Namespace: ns, Queue: "a/b"}}
		},
		"queue pattern": func(p *store.TokenCreateParams) {
			p.Grants = []auth.Grant{{Role: auth.RoleWorker, Namespace: ns, Queue: "*"}}
		},
		"queue with a control": func(p *store.TokenCreateParams) {
			p.Grants = []auth.Grant{{Role: auth.RoleWorker, Namespace: ns, Queue: "q\n"}}
		},
	} {
		p, _ := e.tokenParams("bad", admin)
		change(p)
		if _, err := e.st.TokenCreate(e.ctx, p); !errors.Is(err, store.ErrInvalidParams) {
			t.Errorf("%s: TokenCreate = %v, want ErrInvalidParams", name, err)
		}
	}
	if ts, err := e.st.TokenList(e.ctx); err != nil || len(ts) != 0 {
		t.Errorf("TokenList after invalid creates = %v, %v; want none", ts, err)
	}
}
