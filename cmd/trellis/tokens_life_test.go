package main

import (
	"crypto/tls"
	"crypto/x509/pkix"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/trellis-dev/trellis/internal/auth"
	"github.com/trellis-dev/trellis/internal/auth/storeauth"
	"github.com/trellis-dev/trellis/internal/testcerts"
	"github.com/trellis-dev/trellis/store"
)

// authenticates reports whether secret authenticates on the store at url.
func authenticates(t *testing.T, url, secret string) bool {
	t.Helper()
	st, err := openTokenStore(ctxT(t), url)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	_, err = storeauth.New(st, storeauth.Config{CacheTTL: -1, TouchInterval: -1}).Authenticate(ctxT(t), secret)
	return err == nil
}

// On the store: create with --ttl and --subject, the list's columns and JSON,
// rotate with the default grace (both secrets work) and with --grace 0 (the
// old one stops), and the refusals of rotate.
func TestTokensTTLAndRotate(t *testing.T) {
	t.Parallel()
	url := storeURL(t)
	trellisCmd(t, "migrate", "--store", url).ok(t)
	old := strings.TrimSpace(trellisCmd(t, "tokens", "create", "--name", "ci", "--grant", "reader:shop", "--ttl", "720h",
		"--subject", "CN=ci,O=team", "--store", url).ok(t).stdout)
	res := trellisCmd(t, "tokens", "list", "--store", url).ok(t)
	contains(t, "tokens list", res.stdout, "NAME", "GRANTS", "CREATED", "EXPIRES", "LAST USED", "REVOKED", "SUBJECT", "CN=ci,O=team",
		time.Now().Add(720*time.Hour).Format(time.DateOnly))
	var out struct{ Tokens []map[string]any }
	if err := json.Unmarshal([]byte(trellisCmd(t, "tokens", "list", "--json", "--store", url).ok(t).stdout), &out); err != nil {
		t.Fatal(err)
	}
	if tok := out.Tokens[0]; tok["expires_at"] == nil || tok["last_used_at"] != nil || tok["subject"] != "CN=ci,O=team" {
		t.Errorf("tokens list --json: %v; want expires_at, last_used_at null, the subject", tok)
	}
	if _, ok := out.Tokens[0]["last_used_at"]; !ok {
		t.Error("tokens list --json has no last_used_at field")
	}

	res = trellisCmd(t, "tokens", "rotate", "ci", "--store", url).ok(t)
	rotated := strings.TrimSpace(res.stdout)
	if !auth.LooksLikeToken(rotated) || rotated == old {
		t.Fatalf("tokens rotate printed %q, want only a new secret", res.stdout)
	}
	contains(t, "tokens rotate", res.stderr, `rotated token "ci"`, "the old secret works until", "only this once")
	if !authenticates(t, url, old) || !authenticates(t, url, rotated) {
		t.Fatal("in the grace, the old and the new secret must both work")
	}
	res = trellisCmd(t, "tokens", "rotate", "ci", "--grace", "0", "--store", url).ok(t)
	newest := strings.TrimSpace(res.stdout)
	contains(t, "tokens rotate --grace 0", res.stderr, "the old secret stopped working")
	if authenticates(t, url, rotated) || !authenticates(t, url, newest) {
		t.Fatal("after --grace 0 the old secret must stop and the new one work")
	}
	// The first secret had its grace from the first rotation; --grace 0 ended every earlier secret.
	if authenticates(t, url, old) {
		t.Error("the first secret works after a rotation with --grace 0")
	}

	trellisCmd(t, "tokens", "revoke", "ci", "--store", url).ok(t)
	if res := trellisCmd(t, "tokens", "rotate", "ci", "--store", url); res.code != exitConflict || !strings.Contains(res.stderr, "revoked or expired") {
		t.Errorf("rotate a revoked token: exit %d, stderr %q", res.code, res.stderr)
	}
	if res := trellisCmd(t, "tokens", "rotate", "nobody", "--store", url); res.code != exitNotFound || !strings.Contains(res.stderr, "not found") {
		t.Errorf("rotate an unknown token: exit %d, stderr %q", res.code, res.stderr)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"tokens", "create", "--name", "x", "--grant", "admin:*", "--ttl", "-1h", "--store", url}, "--ttl -1h0m0s"},
		{[]string{"tokens", "create", "--name", "x", "--grant", "admin:*", "--ttl", "10ms", "--store", url}, "1s or more"},
		{[]string{"tokens", "create", "--name", "x", "--grant", "admin:*", "--ttl", "soon", "--store", url}, "invalid value"},
		{[]string{"tokens", "create", "--name", "x", "--grant", "admin:*", "--subject", "w1", "--store", url}, "--subject"},
		{[]string{"tokens", "rotate", "--store", url}, "want one token name"},
		{[]string{"tokens", "rotate", "ci", "--grace", "-1s", "--store", url}, "--grace -1s"},
	} {
		res := trellisCmd(t, c.args...)
		if res.code != 2 || !strings.Contains(res.stderr, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", c.args, res.code, res.stderr, c.want)
		}
	}
	if ts := listTokens(t, url); len(ts) != 1 {
		t.Errorf("refused commands created tokens: %d", len(ts))
	}
}

func listTokens(t *testing.T, url string) []*store.Token {
	t.Helper()
	st, err := openTokenStore(ctxT(t), url)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ts, err := st.TokenList(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	return ts
}

// Through a server: a rotation's old secret works during its grace and not
// after, the new one throughout; the list shows the token's last use.
func TestTokensRotateThroughServer(t *testing.T) {
	t.Parallel()
	url := storeURL(t)
	trellisCmd(t, "migrate", "--store", url).ok(t)
	base, root, stop := startServer(t, url)
	defer stop()
	srv := []string{"--server", base, "--token", root}
	old := strings.TrimSpace(trellisCmd(t, append([]string{"tokens", "create", "--name", "ci", "--grant", "reader:shop", "--ttl", "1h"}, srv...)...).ok(t).stdout)
	status := func(secret string) int {
		req, _ := http.NewRequest("GET", base+"/v1/namespaces/shop/runs", nil)
		req.Header.Set("Authorization", "Bearer "+secret)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode
	}
	if code := status(old); code != 200 {
		t.Fatalf("a new token: %d", code)
	}
	var listed struct{ Tokens []*store.Token }
	if err := json.Unmarshal([]byte(trellisCmd(t, append([]string{"tokens", "list", "--json"}, srv...)...).ok(t).stdout), &listed); err != nil {
		t.Fatal(err)
	}
	for _, tok := range listed.Tokens {
		if tok.LastUsedAt == nil {
			t.Errorf("tokens list after requests of %s shows no last use", tok.Name)
		}
	}
	res := trellisCmd(t, append([]string{"tokens", "list"}, srv...)...).ok(t)
	contains(t, "tokens list", res.stdout, "LAST USED", time.Now().Format(time.DateOnly))
	const grace = 3 * time.Second
	res = trellisCmd(t, append([]string{"tokens", "rotate", "ci", "--grace", grace.String()}, srv...)...).ok(t)
	rotatedAt := time.Now()
	secret := strings.TrimSpace(res.stdout)
	if code := status(old); code != 200 && time.Since(rotatedAt) < grace {
		t.Fatalf("the old secret within its grace: %d, want 200", code)
	}
	if code := status(secret); code != 200 {
		t.Fatalf("the new secret: %d", code)
	}
	waited := waitFor(t, "the old secret refused after its grace", 30*time.Second, func() bool { return status(old) == 401 })
	if since := time.Since(rotatedAt); since < grace-time.Second {
		t.Errorf("the old secret was refused %s after the rotation (waited %s), before its grace of %s", since, waited, grace)
	}
	if code := status(secret); code != 200 {
		t.Fatalf("the new secret after the grace: %d", code)
	}
}

// --admin-token-file: an existing file is never overwritten, and the server
// refuses to start rather than create a token whose secret nobody has; with a
// new path it writes the secret there (0600).
func TestServerAdminTokenFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	url := "sqlite://" + filepath.Join(dir, "t.db")
	existing := filepath.Join(dir, "taken")
	if err := os.WriteFile(existing, []byte("mine\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	res := trellisCmd(t, "server", "--store", url, "--listen", "127.0.0.1:0", "--admin-token-file", existing)
	if res.code != 1 || !strings.Contains(res.stderr, existing) || !strings.Contains(res.stderr, "never overwritten") {
		t.Fatalf("start over an existing token file: exit %d, stderr %q", res.code, res.stderr)
	}
	if b, _ := os.ReadFile(existing); string(b) != "mine\n" {
		t.Fatal("the existing file was changed")
	}
	if ts := listTokens(t, url); len(ts) != 0 {
		t.Fatalf("a refused start created tokens: %v", ts)
	}
	fresh := filepath.Join(dir, "admin.secret")
	base, secret, stop := startServerArgs(t, os.Stderr, "--store", url, "--listen", "127.0.0.1:0", "--admin-token-file", fresh)
	defer stop()
	if got := readSecret(t, fresh); got != secret || !auth.LooksLikeToken(secret) {
		t.Fatalf("the token file holds %q; the start named %q", got, secret)
	}
	trellisCmd(t, "tokens", "list", "--server", base, "--token", secret).ok(t)
}

// `trellis server --tls-cert --tls-key` in a process of its own serves HTTPS,
// and after its files are replaced and it gets SIGHUP, the new certificate.
func TestServerTLSReloadOnSIGHUP(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a real server process")
	}
	t.Parallel()
	dir := t.TempDir()
	ca := testcerts.NewCA(t, "test CA")
	certPEM, keyPEM := ca.Server(t, "server one")
	cert, key := testcerts.Write(t, dir, "tls.crt", certPEM), testcerts.Write(t, dir, "tls.key", keyPEM)
	url := "sqlite://" + filepath.Join(dir, "t.db")
	srv := startTrellisServer(t, "--store", url, "--listen", "127.0.0.1:0", "--tls-cert", cert, "--tls-key", key,
		"--client-ca", testcerts.Write(t, dir, "ca.crt", ca.PEM))
	if !strings.HasPrefix(srv.base(), "https://") {
		t.Fatalf("listening on %s, want https", srv.base())
	}
	waitFor(t, "the web UI's line", 30*time.Second, func() bool { return strings.Contains(srv.stdout(), "web UI at https://") })
	contains(t, "stdout", srv.stdout(), "client certificates")
	served := func() string {
		conn, err := tls.Dial("tcp", srv.addr, &tls.Config{RootCAs: ca.Pool()})
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0].Subject.CommonName
	}
	if cn := served(); cn != "server one" {
		t.Fatalf("served %q", cn)
	}
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool(),
		Certificates: []tls.Certificate{ca.ClientPair(t, pkix.Name{CommonName: "stranger"})}}, ForceAttemptHTTP2: true}}
	defer c.CloseIdleConnections()
	res, err := c.Get(srv.base() + "/v1/tokens")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 401 || res.Header.Get("Strict-Transport-Security") == "" || res.ProtoMajor != 2 {
		t.Errorf("an unknown certificate over HTTPS: %d %s, HSTS %q; want 401 over HTTP/2 with HSTS",
			res.StatusCode, res.Proto, res.Header.Get("Strict-Transport-Security"))
	}

	certPEM, keyPEM = ca.Server(t, "server two")
	for path, data := range map[string][]byte{cert: certPEM, key: keyPEM} {
		if err := os.WriteFile(path+".new", data, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(path+".new", path); err != nil {
			t.Fatal(err)
		}
	}
	srv.signal(t, syscall.SIGHUP)
	waitFor(t, "the new certificate served", 30*time.Second, func() bool { return served() == "server two" })
	// The new pair is served before the line is printed and read from the
	// pipe, so the line is waited for too.
	waitFor(t, "the reload told on stdout", 10*time.Second, func() bool { return strings.Contains(srv.stdout(), "SIGHUP: reloaded") })
	if srv.exited() {
		t.Fatal("the server exited on SIGHUP")
	}
}
