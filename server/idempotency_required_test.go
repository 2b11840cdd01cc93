package server

import (
	"encoding/json"
	"strings"
	"testing"
)

// With RequireIdempotencyKey, every route that takes an Idempotency-Key
// refuses a request without one (400 invalid_argument, naming the header) and
// changes nothing, and serves it with one; the token routes, which keep no
// keys, and the reads need none.
func TestRequireIdempotencyKey(t *testing.T) {
	e := newWalkEnv(t, storeURLs(t)["sqlite"](t), func(c *Config) { c.RequireIdempotencyKey = true })
	e.keyAll = true // the fixtures' own requests
	for i, rt := range routeTable {
		if !rt.takesKey() {
			continue
		}
		fixture := keyedFixtures[rt.op]
		if fixture == nil {
			t.Errorf("%s %s: no fixture", rt.method, rt.pattern)
			continue
		}
		path, body := fixture(e, i)
		raw := ""
		if body != nil {
			raw = mustJSON(t, body)
		}
		before := e.runCount()
		r, err := e.send(rt.method, path, "admin", raw)
		if err != nil {
			t.Fatal(err)
		}
		p := r.problem(t, 400, "invalid_argument")
		if !strings.Contains(p.Detail, IdempotencyKeyHeader) {
			t.Errorf("%s %s without a key: detail %q does not name the header", rt.method, path, p.Detail)
		}
		if n := e.runCount(); n != before {
			t.Errorf("%s %s without a key changed the runs: %d, then %d", rt.method, path, before, n)
		}
		r, err = e.send(rt.method, path, "admin", raw, IdempotencyKeyHeader, "required-"+rt.op)
		if err != nil {
			t.Fatal(err)
		}
		if r.status != rt.status {
			t.Errorf("%s %s with a key: %d %s, want %d", rt.method, path, r.status, r.body, rt.status)
		}
	}
	// No key needed: the token routes and the reads.
	r, err := e.send("POST", "/v1/tokens", "admin", `{"name":"nokey","grants":[{"role":"reader","namespace":"default"}]}`)
	if err != nil || r.status != 201 {
		t.Fatalf("create token without a key: %v %d %s", err, r.status, r.body)
	}
	if r, err = e.send("POST", "/v1/tokens/nokey/revoke", "admin", ""); err != nil || r.status != 200 {
		t.Fatalf("revoke token without a key: %v %d %s", err, r.status, r.body)
	}
	e.keyAll = false
	e.do("GET", runsPath, "reader", nil).want(t, 200)
	e.do("GET", "/v1/audit", "admin", nil).want(t, 200)
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
