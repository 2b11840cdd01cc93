package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/trellis-dev/trellis/internal/auth"
	"github.com/trellis-dev/trellis/store"
)

// The life of a token: expiry, rotation with a grace, certificate subjects and
// last use (docs/security.md).
var tokenLifeCases = []testCase{
	{"ExpiresAfterTTL", tokenExpiresAfterTTL},
	{"RotateWithGrace", tokenRotateWithGrace},
	{"RotateGraceZero", tokenRotateGraceZero},
	{"RotateGraceEndsWithExpiry", tokenRotateGraceEndsWithExpiry},
	{"RotateDuringGrace", tokenRotateDuringGrace},
	{"RotateDuringGraceShorter", tokenRotateDuringGraceShorter},
	{"RotateRefused", tokenRotateRefused},
	{"RevokeEndsGrace", tokenRevokeEndsGrace},
	{"Subject", tokenSubject},
	{"SubjectExpires", tokenSubjectExpires},
	{"Touch", tokenTouch},
	{"LifeInvalidParams", tokenLifeInvalidParams},
}

// createTokenWith creates a token with changes applied to its parameters and
// returns its secret.
func (e *env) createTokenWith(name string, change func(p *store.TokenCreateParams)) string {
	e.t.Helper()
	p, secret := e.tokenParams(name)
	change(p)
	if _, err := e.st.TokenCreate(e.ctx, p); err != nil {
		e.t.Fatalf("TokenCreate(%s): %v", name, err)
	}
	return secret
}

// rotateToken rotates name with grace and returns the new secret and the token.
func (e *env) rotateToken(name string, grace time.Duration) (string, *store.Token) {
	e.t.Helper()
	secret, hash, err := auth.NewToken()
	if err != nil {
		e.t.Fatal(err)
	}
	tok, err := e.st.TokenRotate(e.ctx, &store.TokenRotateParams{Name: name, Hash: hash, Grace: grace})
	if err != nil {
		e.t.Fatalf("TokenRotate(%s, %s): %v", name, grace, err)
	}
	return secret, tok
}

// wantSecret checks that secret finds token name and works until until (nil: never).
func (e *env) wantSecret(what, secret, name string, until *time.Time) {
	e.t.Helper()
	tok, err := e.tokenByHash(secret)
	if err != nil || tok.Name != name {
		e.t.Fatalf("%s: TokenByHash = %+v, %v; want token %s", what, tok, err, name)
	}
	if !sameTimePtr(tok.SecretExpiresAt, until) {
		e.t.Errorf("%s: SecretExpiresAt = %v, want %v", what, tok.SecretExpiresAt, until)
	}
}

// wantNoSecret checks that secret finds no token.
func (e *env) wantNoSecret(what, secret string) {
	e.t.Helper()
	if tok, err := e.tokenByHash(secret); !errors.Is(err, store.ErrTokenNotFound) {
		e.t.Errorf("%s: TokenByHash = %+v, %v; want ErrTokenNotFound", what, tok, err)
	}
}

// sameTime reports whether two optional times are both nil or within timeTolerance.
func sameTimePtr(a, b *time.Time) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return sameTime(*a, *b)
}

func tokenExpiresAfterTTL(t *testing.T, e *env) {
	created := e.clk.Now()
	secret := e.createTokenWith("ci", func(p *store.TokenCreateParams) { p.TTL = time.Hour })
	forever := e.createToken("forever")
	expires := created.Add(time.Hour)
	e.wantSecret("before the TTL", secret, "ci", &expires)
	e.wantSecret("a token without TTL", forever, "forever", nil)
	e.clk.Advance(time.Hour - time.Millisecond)
	e.wantSecret("just before the TTL", secret, "ci", &expires)
	e.clk.Advance(time.Millisecond)
	e.wantNoSecret("at the TTL", secret)
	e.clk.Advance(1000 * time.Hour)
	e.wantSecret("a token without TTL, much later", forever, "forever", nil)
	ts, err := e.st.TokenList(e.ctx)
	if err != nil || len(ts) != 2 {
		t.Fatalf("TokenList = %v, %v", ts, err)
	}
	if !sameTimePtr(ts[0].ExpiresAt, &expires) || ts[0].RevokedAt != nil || ts[1].ExpiresAt != nil {
		t.Errorf("listed ExpiresAt = %v, %v; want %v (expired, listed) and nil", ts[0].ExpiresAt, ts[1].ExpiresAt, expires)
	}
	if ts[0].Active(e.clk.Now()) || !ts[1].Active(e.clk.Now()) {
		t.Error("Active: want ci expired, forever active")
	}
}

func tokenRotateWithGrace(t *testing.T, e *env) {
	old := e.createTokenWith("ci", func(p *store.TokenCreateParams) { p.TTL = 2 * time.Hour })
	now := e.clk.Advance(10 * time.Minute)
	secret, tok := e.rotateToken("ci", 30*time.Minute)
	graceEnd, expires := now.Add(30*time.Minute), now.Add(2*time.Hour)
	if !sameTimePtr(tok.RotatedAt, &now) || !sameTimePtr(tok.PreviousExpiresAt, &graceEnd) || !sameTimePtr(tok.ExpiresAt, &expires) {
		t.Errorf("rotated token = rotated %v, previous until %v, expires %v; want %v, %v, %v (the TTL again)",
			tok.RotatedAt, tok.PreviousExpiresAt, tok.ExpiresAt, now, graceEnd, expires)
	}
	e.wantSecret("the new secret", secret, "ci", &expires)
	e.wantSecret("the old secret in the grace", old, "ci", &graceEnd)
	e.clk.Advance(30*time.Minute - time.Millisecond)
	e.wantSecret("the old secret at the end of the grace", old, "ci", &graceEnd)
	e.clk.Advance(time.Millisecond)
	e.wantNoSecret("the old secret after the grace", old)
	e.wantSecret("the new secret after the grace", secret, "ci", &expires)
	ts, err := e.st.TokenList(e.ctx)
	if err != nil || len(ts) != 1 || !sameTimePtr(ts[0].PreviousExpiresAt, &graceEnd) {
		t.Errorf("TokenList = %+v, %v; want ci with PreviousExpiresAt %v", ts, err, graceEnd)
	}
}

func tokenRotateGraceZero(t *testing.T, e *env) {
	old := e.createToken("ci")
	secret, tok := e.rotateToken("ci", 0)
	if tok.PreviousExpiresAt != nil || tok.ExpiresAt != nil {
		t.Errorf("rotated with no grace: PreviousExpiresAt %v, ExpiresAt %v; want nil, nil", tok.PreviousExpiresAt, tok.ExpiresAt)
	}
	e.wantNoSecret("the old secret, no grace", old)
	e.wantSecret("the new secret", secret, "ci", nil)
}

// The replaced secret never outlives its own expiry.
func tokenRotateGraceEndsWithExpiry(t *testing.T, e *env) {
	created := e.clk.Now()
	old := e.createTokenWith("ci", func(p *store.TokenCreateParams) { p.TTL = time.Hour })
	e.clk.Advance(50 * time.Minute)
	secret, tok := e.rotateToken("ci", time.Hour)
	oldEnd := created.Add(time.Hour)
	if !sameTimePtr(tok.PreviousExpiresAt, &oldEnd) {
		t.Errorf("PreviousExpiresAt = %v, want the old secret's expiry %v", tok.PreviousExpiresAt, oldEnd)
	}
	e.clk.Set(oldEnd)
	e.wantNoSecret("the old secret past its expiry", old)
	e.wantSecret("the new secret", secret, "ci", tok.ExpiresAt)
}

// A second rotation within the grace of the first ends the first's secret and
// leaves the original its grace (the first answer may have been lost).
func tokenRotateDuringGrace(t *testing.T, e *env) {
	original := e.createToken("ci")
	e.clk.Advance(time.Minute)
	first, tok1 := e.rotateToken("ci", time.Hour)
	e.clk.Advance(time.Minute)
	second, tok2 := e.rotateToken("ci", time.Hour)
	if !sameTimePtr(tok2.PreviousExpiresAt, tok1.PreviousExpiresAt) {
		t.Errorf("PreviousExpiresAt after a rotation in the grace = %v, want the first grace's %v", tok2.PreviousExpiresAt, tok1.PreviousExpiresAt)
	}
	e.wantSecret("the original secret", original, "ci", tok1.PreviousExpiresAt)
	e.wantNoSecret("the secret of the first rotation", first)
	e.wantSecret("the secret of the second rotation", second, "ci", nil)
	e.clk.Set(*tok1.PreviousExpiresAt)
	e.wantNoSecret("the original secret after its grace", original)
	third, tok3 := e.rotateToken("ci", time.Hour) // no grace running: the second gets one
	e.wantSecret("the second secret in its grace", second, "ci", tok3.PreviousExpiresAt)
	e.wantSecret("the third secret", third, "ci", nil)
}

// A rotation in an earlier one's grace, with a shorter grace, ends the older
// secret at its own grace's end: no secret outlives the grace last asked for.
func tokenRotateDuringGraceShorter(t *testing.T, e *env) {
	original := e.createToken("ci")
	e.rotateToken("ci", time.Hour)
	e.clk.Advance(time.Minute)
	_, tok := e.rotateToken("ci", 5*time.Minute)
	want := e.clk.Now().Add(5 * time.Minute)
	e.wantSecret("the original secret", original, "ci", &want)
	if !sameTimePtr(tok.PreviousExpiresAt, &want) {
		t.Errorf("PreviousExpiresAt = %v, want %v (the shorter grace)", tok.PreviousExpiresAt, want)
	}
	e.clk.Advance(5 * time.Minute)
	e.wantNoSecret("the original secret after the shorter grace", original)
}

func tokenRotateRefused(t *testing.T, e *env) {
	_, hash, err := auth.NewToken()
	if err != nil {
		t.Fatal(err)
	}
	rotate := func(name string) error {
		_, err := e.st.TokenRotate(e.ctx, &store.TokenRotateParams{Name: name, Hash: hash, Grace: time.Hour})
		return err
	}
	if err := rotate("nobody"); !errors.Is(err, store.ErrTokenNotFound) {
		t.Errorf("TokenRotate(unknown) = %v, want ErrTokenNotFound", err)
	}
	revoked := e.createToken("revoked")
	e.revokeToken("revoked")
	if err := rotate("revoked"); !errors.Is(err, store.ErrTokenInactive) {
		t.Errorf("TokenRotate(revoked) = %v, want ErrTokenInactive", err)
	}
	e.createTokenWith("expired", func(p *store.TokenCreateParams) { p.TTL = time.Minute })
	e.clk.Advance(time.Minute)
	if err := rotate("expired"); !errors.Is(err, store.ErrTokenInactive) {
		t.Errorf("TokenRotate(expired) = %v, want ErrTokenInactive", err)
	}
	e.wantNoSecret("the revoked token after a refused rotation", revoked)
	if tok, err := e.st.TokenByHash(e.ctx, &store.TokenByHashParams{Hash: hash}); !errors.Is(err, store.ErrTokenNotFound) {
		t.Errorf("the new hash of refused rotations finds %+v, %v", tok, err)
	}
}

func tokenRevokeEndsGrace(t *testing.T, e *env) {
	old := e.createToken("ci")
	secret, _ := e.rotateToken("ci", time.Hour)
	e.revokeToken("ci")
	e.wantNoSecret("the old secret of a revoked token", old)
	e.wantNoSecret("the new secret of a revoked token", secret)
}

func (e *env) tokenBySubject(subject string) (*store.Token, error) {
	return e.st.TokenBySubject(e.ctx, &store.TokenBySubjectParams{Subject: subject})
}

func tokenSubject(t *testing.T, e *env) {
	const subject = "CN=w1,O=team"
	grants := []auth.Grant{{Role: auth.RoleWorker, Namespace: ns, Queue: "q"}}
	e.createTokenWith("w1", func(p *store.TokenCreateParams) { p.Subject, p.Grants = subject, grants })
	tok, err := e.tokenBySubject(subject)
	if err != nil || tok.Name != "w1" || tok.Subject != subject || len(tok.Grants) != 1 || tok.Grants[0] != grants[0] {
		t.Fatalf("TokenBySubject = %+v, %v; want w1 with %v", tok, err, grants)
	}
	for _, other := range []string{"CN=w1", "CN=w1,O=other", "cn=w1,o=team"} {
		if tok, err := e.tokenBySubject(other); !errors.Is(err, store.ErrTokenNotFound) {
			t.Errorf("TokenBySubject(%q) = %+v, %v; want ErrTokenNotFound (exact match)", other, tok, err)
		}
	}
	p, _ := e.tokenParams("w1-again")
	p.Subject = subject
	if _, err := e.st.TokenCreate(e.ctx, p); !errors.Is(err, store.ErrTokenExists) {
		t.Errorf("TokenCreate with a live token's subject = %v, want ErrTokenExists", err)
	}
	e.revokeToken("w1")
	if tok, err := e.tokenBySubject(subject); !errors.Is(err, store.ErrTokenNotFound) {
		t.Errorf("TokenBySubject of a revoked token = %+v, %v; want ErrTokenNotFound", tok, err)
	}
	if _, err := e.st.TokenCreate(e.ctx, p); err != nil {
		t.Fatalf("TokenCreate with a revoked token's subject: %v", err)
	}
	if tok, err := e.tokenBySubject(subject); err != nil || tok.Name != "w1-again" {
		t.Errorf("TokenBySubject after a new token took the subject = %+v, %v; want w1-again", tok, err)
	}
}

func tokenSubjectExpires(t *testing.T, e *env) {
	e.createTokenWith("w1", func(p *store.TokenCreateParams) { p.Subject, p.TTL = "CN=w1", time.Hour })
	if _, err := e.tokenBySubject("CN=w1"); err != nil {
		t.Fatalf("TokenBySubject: %v", err)
	}
	e.clk.Advance(time.Hour)
	if tok, err := e.tokenBySubject("CN=w1"); !errors.Is(err, store.ErrTokenNotFound) {
		t.Errorf("TokenBySubject of an expired token = %+v, %v; want ErrTokenNotFound", tok, err)
	}
}

// lastUsed returns the LastUsedAt of token name from the list.
func (e *env) lastUsed(name string) *time.Time {
	e.t.Helper()
	ts, err := e.st.TokenList(e.ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	for _, tok := range ts {
		if tok.Name == name {
			return tok.LastUsedAt
		}
	}
	e.t.Fatalf("no token %s", name)
	return nil
}

func tokenTouch(t *testing.T, e *env) {
	secret := e.createToken("a")
	e.createToken("b")
	if got := e.lastUsed("a"); got != nil {
		t.Fatalf("LastUsedAt of a new token = %v, want nil", got)
	}
	first := e.clk.Advance(time.Minute)
	if err := e.st.TokenTouch(e.ctx, &store.TokenTouchParams{Names: []string{"a", "b", "nobody"}}); err != nil {
		t.Fatalf("TokenTouch: %v", err)
	}
	if a, b := e.lastUsed("a"), e.lastUsed("b"); !sameTimePtr(a, &first) || !sameTimePtr(b, &first) {
		t.Errorf("LastUsedAt = %v, %v; want %v", a, b, first)
	}
	later := e.clk.Advance(time.Minute)
	if err := e.st.TokenTouch(e.ctx, &store.TokenTouchParams{Names: []string{"a"}}); err != nil {
		t.Fatalf("TokenTouch: %v", err)
	}
	if a, b := e.lastUsed("a"), e.lastUsed("b"); !sameTimePtr(a, &later) || !sameTimePtr(b, &first) {
		t.Errorf("LastUsedAt = %v, %v; want %v, %v", a, b, later, first)
	}
	if tok, err := e.tokenByHash(secret); err != nil || !sameTimePtr(tok.LastUsedAt, &later) {
		t.Errorf("TokenByHash LastUsedAt = %+v, %v; want %v", tok, err, later)
	}
	e.clk.Set(first) // a server whose clock is behind never moves it back
	if err := e.st.TokenTouch(e.ctx, &store.TokenTouchParams{Names: []string{"a"}}); err != nil {
		t.Fatalf("TokenTouch: %v", err)
	}
	if a := e.lastUsed("a"); !sameTimePtr(a, &later) {
		t.Errorf("LastUsedAt after a touch at an earlier time = %v, want %v", a, later)
	}
	if err := e.st.TokenTouch(e.ctx, &store.TokenTouchParams{}); err != nil {
		t.Errorf("TokenTouch of no names: %v", err)
	}
	if err := e.st.TokenTouch(e.ctx, &store.TokenTouchParams{Names: make([]string, store.MaxTokenTouch+1)}); !errors.Is(err, store.ErrInvalidParams) {
		t.Errorf("TokenTouch of too many names = %v, want ErrInvalidParams", err)
	}
}

func tokenLifeInvalidParams(t *testing.T, e *env) {
	for name, change := range map[string]func(p *store.TokenCreateParams){
		"negative TTL":           func(p *store.TokenCreateParams) { p.TTL = -time.Hour },
		"TTL under a second":     func(p *store.TokenCreateParams) { p.TTL = time.Millisecond },
		"TTL over a century":     func(p *store.TokenCreateParams) { p.TTL = store.MaxTokenDuration + time.Hour },
		"subject without =":      func(p *store.TokenCreateParams) { p.Subject = "w1" },
		"subject with a newline": func(p *store.TokenCreateParams) { p.Subject = "CN=w1\nO=x" },
	} {
		p, _ := e.tokenParams("bad")
		change(p)
		if _, err := e.st.TokenCreate(e.ctx, p); !errors.Is(err, store.ErrInvalidParams) {
			t.Errorf("%s: TokenCreate = %v, want ErrInvalidParams", name, err)
		}
	}
	e.createToken("ci")
	_, hash, _ := auth.NewToken()
	for name, p := range map[string]*store.TokenRotateParams{
		"short hash":     {Name: "ci", Hash: hash[:8]},
		"negative grace": {Name: "ci", Hash: hash, Grace: -time.Second},
		"no name":        {Hash: hash},
	} {
		if _, err := e.st.TokenRotate(e.ctx, p); !errors.Is(err, store.ErrInvalidParams) {
			t.Errorf("%s: TokenRotate = %v, want ErrInvalidParams", name, err)
		}
	}
	if ts, err := e.st.TokenList(e.ctx); err != nil || len(ts) != 1 || ts[0].RotatedAt != nil {
		t.Errorf("TokenList after invalid calls = %+v, %v; want ci alone, never rotated", ts, err)
	}
}
