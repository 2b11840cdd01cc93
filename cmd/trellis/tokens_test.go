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
	if res.code != 1 || !strings.Contains(res.stderr, "already exists") {
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
	if res := trellisCmd(t, "tokens", "revoke", "nobody", "--store", url); res.code != 1 || !strings.Contains(res.stderr, "not found") {
		t.Errorf("revoke unknown: exit %d, stderr %q", res.code, res.stderr)
	}
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
		{[]string{"tokens", "create", "--grant", "admin:*", "--store", url}, "--name: Name is required"},
		{[]string{"tokens", "create", "--name", "a b", "--grant", "admin:*", "--store", url}, "no spaces"},
		{[]string{"tokens", "create", "--name", "x", "--grant", "root:*", "--store", url}, `unknown role "root"`},
		{[]string{"tokens", "create", "--name", "x", "--grant", "admin:__system__", "--store", url}, "reserved"},
		{[]string{"tokens", "create", "--name", "x", "--grant", "admin", "--store", url}, "is not ROLE:NAMESPACE"},
		{[]string{"tokens", "create", "--name", "x", "--grant", "admin:*"}, "--store is required"},
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
