package server

import (
	"strings"
	"testing"
)

// The tokens page lists every token with its state and times, never a secret,
// to an admin of every namespace, whose navigation links it; an admin of one
// namespace and a reader are refused.
func TestUITokensPage(t *testing.T) {
	t.Parallel()
	e, root := newTokenEnv(t, storeURLs(t)["sqlite"](t))
	var ci, nsAdmin CreatedToken
	e.do("POST", "/v1/tokens", root, map[string]any{"name": "ci", "ttl": "720h",
		"grants": []map[string]any{{"role": "producer", "namespace": "default", "queue": "q1"}}}).want(t, 201).decode(t, &ci)
	e.do("POST", "/v1/tokens", root, map[string]any{"name": "w1", "subject": "CN=w1,O=team",
		"grants": []map[string]any{{"role": "worker", "namespace": "default"}}}).want(t, 201)
	e.do("POST", "/v1/tokens", root, map[string]any{"name": "ns-admin",
		"grants": []map[string]any{{"role": "admin", "namespace": "default"}}}).want(t, 201).decode(t, &nsAdmin)
	e.do("POST", "/v1/tokens", root, map[string]any{"name": "gone",
		"grants": []map[string]any{{"role": "reader", "namespace": "default"}}}).want(t, 201)
	e.do("POST", "/v1/tokens/gone/revoke", root, nil).want(t, 200)
	var rotated CreatedToken
	e.do("POST", "/v1/tokens/ci/rotate", root, nil).want(t, 200).decode(t, &rotated)

	admin := e.uiSession(root)
	page := admin.get("/ui/tokens")
	body := string(page.body)
	if page.status != 200 {
		t.Fatalf("tokens page: %d %s", page.status, body)
	}
	for _, want := range []string{`data-token="admin"`, `data-token="ci"`, `data-token="w1"`, `data-token="gone"`,
		"producer:default:q1", "CN=w1,O=team", ">revoked<", "old secret until", `data-nav="tokens"`} {
		if !strings.Contains(body, want) {
			t.Errorf("tokens page lacks %q", want)
		}
	}
	for _, secret := range []string{root, ci.Secret, rotated.Secret, nsAdmin.Secret} {
		if strings.Contains(body, secret) {
			t.Fatal("the tokens page shows a secret")
		}
	}
	if runs := admin.get("/ui/default/runs"); !strings.Contains(string(runs.body), `data-nav="tokens"`) {
		t.Error("an admin of every namespace has no Tokens link in the navigation")
	}
	ns := e.uiSession(nsAdmin.Secret)
	if r := ns.get("/ui/tokens"); r.status != 403 || !strings.Contains(string(r.body), "permission") {
		t.Errorf("tokens page as an admin of one namespace: %d", r.status)
	}
	if runs := ns.get("/ui/default/runs"); runs.status != 200 || strings.Contains(string(runs.body), `data-nav="tokens"`) {
		t.Errorf("an admin of one namespace: runs %d, with a Tokens link", runs.status)
	}
	if r := e.uiSession("").get("/ui/tokens"); r.status != 303 || !strings.HasPrefix(r.header.Get("Location"), "/ui/login?next=") {
		t.Errorf("tokens page without a session: %d %s", r.status, r.header.Get("Location"))
	}
}
