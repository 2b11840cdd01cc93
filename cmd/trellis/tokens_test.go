package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/trellis-dev/trellis/internal/auth"
	"github.com/trellis-dev/trellis/internal/auth/storeauth"
	"github.com/trellis-dev/trellis/store"
)

func TestTokens(t *testing.T) {
	t.Parallel()
	url := storeURL(t)
	trellisCmd(t, "migrate", "--store", url).ok(t)
	res := trellisCmd(t, "tokens", "create", "--name", "ci", "--grant", "producer:shop:emails",
		"--grant", "reader:*", "--store", url).ok(t)
	secret := strings.TrimSpace(res.stdout)
	if !auth.LooksLikeToken(secret) {
		t.Fatalf("tokens create printed %q, want only the secret", res.stdout)
	}
	contains(t, "tokens create", res.stderr, `created token "ci"`, "only this once")

	st, err := openTokenStore(ctxT(t), url)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	p, err := storeauth.New(st, storeauth.Config{CacheTTL: -1}).Authenticate(ctxT(t), secret)
	if err != nil || p.Name != "ci" || !p.Allows(auth.RoleProducer, "shop", "emails") || p.Allows(auth.RoleProducer, "shop", "other") {
		t.Fatalf("the printed secret authenticates as %+v, %v", p, err)
	}

	res = trellisCmd(t, "tokens", "create", "--name", "ci", "--grant", "admin:*", "--store", url)
	if res.code != exitConflict || !strings.Contains(res.stderr, "already exists") {
		t.Errorf("duplicate create: exit %d, stderr %q", res.code, res.stderr)
	}
	res = trellisCmd(t, "tokens", "list", "--store", url).ok(t)
	contains(t, "tokens list", res.stdout, "NAME", "GRANTS", "ci", "producer:shop:emails,reader:*")
	if strings.Contains(res.stdout, secret) {
		t.Error("tokens list shows the secret")
	}

	res = trellisCmd(t, "tokens", "revoke", "ci", "--store", url).ok(t)
	contains(t, "tokens revoke", res.stdout, `revoked token "ci"`)
	if _, err := st.TokenByHash(ctxT(t), &store.TokenByHashParams{Hash: auth.HashToken(secret)}); err == nil {
		t.Error("the revoked token is still found")
	}
	res = trellisCmd(t, "tokens", "list", "--json", "--store", url).ok(t)
	var out struct{ Tokens []*store.Token }
	if err := json.Unmarshal([]byte(res.stdout), &out); err != nil || len(out.Tokens) != 1 || out.Tokens[0].RevokedAt == nil {
		t.Errorf("tokens list --json = %s (%v), want ci revoked", res.stdout, err)
	}
	if res := trellisCmd(t, "tokens", "revoke", "nobody", "--store", url); res.code != exitNotFound || !strings.Contains(res.stderr, "not found") {
		t.Errorf("revoke unknown: exit %d, stderr %q", res.code, res.stderr)
	}
	// A queue's name may hold a ':' (not a '/'): the grant's third part is
	// the rest of the flag.
	trellisCmd(t, "tokens", "create", "--name", "deployer", "--grant", "worker:shop:eu:west", "--store", url).ok(t)
	res = trellisCmd(t, "tokens", "list", "--store", url).ok(t)
	contains(t, "tokens list", res.stdout, "deployer", "worker:shop:eu:west")
}

func TestTokensUsage(t *testing.T) {
	t.Parallel()
	url := storeURL(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"tokens"}, "no subcommand"},
		{[]string{"tokens", "frob"}, "unknown subcommand"},
		{[]string{"tokens", "create", "--name", "x", "--store", url}, "at least one --grant"},
		{[]string{"tokens", "create", "--grant", "admin:*", "--store", url}, "--name: token name is required"},
		{[]string{"tokens", "create", "--name", "a b", "--grant", "admin:*", "--store", url}, "white space"},
		{[]string{"tokens", "create", "--name", "ci/deploy", "--grant", "admin:*", "--store", url}, `token name "ci/deploy": no '/'`},
		{[]string{"tokens", "create", "--name", "ci*", "--grant", "admin:*", "--store", url}, "'*'"},
		{[]string{"tokens", "create", "--name", "x", "--grant", "reader:ns*", "--store", url}, `namespace name "ns*": 1 to 63 letters`},
		{[]string{"tokens", "create", "--name", "x", "--grant", "reader:a/b", "--store", url}, `namespace name "a/b"`},
		{[]string{"tokens", "create", "--name", "x", "--grant", "worker:shop:q/1", "--store", url}, `queue name "q/1": no '/'`},
		{[]string{"tokens", "create", "--name", "x", "--grant", "worker:shop:*", "--store", url}, `queue name "*"`},
		{[]string{"tokens", "create", "--name", "x", "--grant", "root:*", "--store", url}, `unknown role "root"`},
		{[]string{"tokens", "create", "--name", "x", "--grant", "admin:__system__", "--store", url}, "reserved"},
		{[]string{"tokens", "create", "--name", "x", "--grant", "admin", "--store", url}, "is not ROLE:NAMESPACE"},
		{[]string{"tokens", "create", "--name", "x", "--grant", "admin:*"}, "--store or --server is required"},
		{[]string{"tokens", "revoke", "--store", url}, "want one token name"},
		{[]string{"tokens", "list", "extra", "--store", url}, "unexpected argument"},
	} {
		res := trellisCmd(t, c.args...)
		if res.code != 2 || !strings.Contains(res.stderr, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", c.args, res.code, res.stderr, c.want)
		}
	}
	res := trellisCmd(t, "tokens", "list", "--store", url)
	contains(t, "tokens list of a missing store", res.stderr, "no store at")
}

// Tokens through a server, by its bootstrap admin: the same commands and output
// as on the store; a token that is no admin of every namespace is refused and
// changes nothing.
func TestTokensThroughServer(t *testing.T) {
	url := storeURL(t)
	trellisCmd(t, "migrate", "--store", url).ok(t)
	base, root, stop := startServer(t, url)
	defer stop()
	srv := []string{"--server", base, "--token", root}

	res := trellisCmd(t, append([]string{"tokens", "create", "--name", "ci", "--grant", "reader:shop", "--grant", "producer:shop:emails"}, srv...)...).ok(t)
	secret := strings.TrimSpace(res.stdout)
	if !auth.LooksLikeToken(secret) {
		t.Fatalf("tokens create printed %q, want only the secret", res.stdout)
	}
	contains(t, "tokens create", res.stderr, `created token "ci"`, "only this once")
	// Stored hashed: the store finds the token by the hash of the printed secret.
	st, err := openTokenStore(ctxT(t), url)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if tok, err := st.TokenByHash(ctxT(t), &store.TokenByHashParams{Hash: auth.HashToken(secret)}); err != nil || tok.Name != "ci" {
		t.Fatalf("by hash: %+v %v", tok, err)
	}
	// The new token reads its namespace through the server.
	trellisCmd(t, "runs", "list", "--namespace", "shop", "--server", base, "--token", secret).ok(t)

	res = trellisCmd(t, append([]string{"tokens", "list"}, srv...)...).ok(t)
	contains(t, "tokens list", res.stdout, "admin:*", "ci", "reader:shop,producer:shop:emails")
	if strings.Contains(res.stdout, secret) || strings.Contains(res.stdout, root) {
		t.Error("tokens list shows a secret")
	}
	// A reader (or an admin of one namespace) is no token admin.
	for _, args := range [][]string{
		{"tokens", "list"},
		{"tokens", "create", "--name", "mine", "--grant", "admin:*"},
		{"tokens", "revoke", "admin"},
	} {
		res := trellisCmd(t, append(args, "--server", base, "--token", secret)...)
		if res.code != exitPermission || !strings.Contains(res.stderr, "permission denied") {
			t.Errorf("%v as a reader: exit %d, stderr %q", args, res.code, res.stderr)
		}
	}
	if res := trellisCmd(t, "tokens", "list", "--server", base, "--token", "wrong"); res.code != exitPermission || !strings.Contains(res.stderr, "unknown, revoked or expired token") {
		t.Errorf("wrong token: exit %d, stderr %q", res.code, res.stderr)
	}
	res = trellisCmd(t, append([]string{"tokens", "create", "--name", "ci", "--grant", "admin:*"}, srv...)...)
	if res.code != exitConflict || !strings.Contains(res.stderr, "already exists") {
		t.Errorf("duplicate create: exit %d, stderr %q", res.code, res.stderr)
	}
	if ts, err := st.TokenList(ctxT(t)); err != nil || len(ts) != 2 {
		t.Fatalf("refused calls changed the tokens: %d %v", len(ts), err)
	}

	t.Setenv(envServer, base)
	t.Setenv(envToken, root)
	res = trellisCmd(t, "tokens", "revoke", "ci").ok(t)
	contains(t, "tokens revoke", res.stdout, `revoked token "ci"`)
	if _, err := st.TokenByHash(ctxT(t), &store.TokenByHashParams{Hash: auth.HashToken(secret)}); err == nil {
		t.Error("the revoked token is still found")
	}
	if res := trellisCmd(t, "tokens", "revoke", "nobody"); res.code != exitNotFound || !strings.Contains(res.stderr, "not found") {
		t.Errorf("revoke unknown: exit %d, stderr %q", res.code, res.stderr)
	}
	if res := trellisCmd(t, "tokens", "list", "--store", url, "--server", base); res.code != 2 || !strings.Contains(res.stderr, "exclude each other") {
		t.Errorf("--store with --server: exit %d, stderr %q", res.code, res.stderr)
	}
}
