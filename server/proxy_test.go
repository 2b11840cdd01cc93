package server

import (
	"crypto/tls"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"testing"
)

func mustPrefixes(t *testing.T, vs ...string) []netip.Prefix {
	t.Helper()
	var ps []netip.Prefix
	for _, v := range vs {
		p, err := ParseTrustedProxy(v)
		if err != nil {
			t.Fatalf("ParseTrustedProxy(%q): %v", v, err)
		}
		ps = append(ps, p)
	}
	return ps
}

func TestParseTrustedProxy(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"10.0.0.0/8": "10.0.0.0/8", "10.1.2.3/8": "10.0.0.0/8", "192.168.1.7": "192.168.1.7/32",
		"fd00::/8": "fd00::/8", "::1": "::1/128", " 127.0.0.1 ": "127.0.0.1/32", "::ffff:10.0.0.1": "10.0.0.1/32",
	} {
		p, err := ParseTrustedProxy(in)
		if err != nil || p.String() != want {
			t.Errorf("ParseTrustedProxy(%q) = %v, %v; want %s", in, p, err, want)
		}
	}
	for _, in := range []string{"", "10.0.0.0/33", "proxy.example", "10.0.0.0/8/8"} {
		if _, err := ParseTrustedProxy(in); err == nil {
			t.Errorf("ParseTrustedProxy(%q) accepted", in)
		}
	}
}

// overTLS and clientAddr believe X-Forwarded-Proto and X-Forwarded-For only
// from a trusted proxy; X-Forwarded-For is read from the right, past the
// trusted proxies, so that what a client put on its left is not believed.
func TestProxyHeaders(t *testing.T) {
	t.Parallel()
	s := &Server{cfg: Config{TrustedProxies: mustPrefixes(t, "10.0.0.0/8", "fd00::/8")}}
	req := func(remote string, hdr ...string) *http.Request {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = remote
		for i := 0; i+1 < len(hdr); i += 2 {
			r.Header.Add(hdr[i], hdr[i+1])
		}
		return r
	}
	for _, c := range []struct {
		r      *http.Request
		tls    bool
		client string
	}{
		{req("203.0.113.9:5000"), false, "203.0.113.9"},
		{req("203.0.113.9:5000", "X-Forwarded-Proto", "https", "X-Forwarded-For", "1.2.3.4"), false, "203.0.113.9"},
		{req("10.0.0.2:5000", "X-Forwarded-Proto", "https", "X-Forwarded-For", "198.51.100.7"), true, "198.51.100.7"},
		{req("10.0.0.2:5000", "X-Forwarded-Proto", "http"), false, "10.0.0.2"},
		{req("10.0.0.2:5000", "X-Forwarded-Proto", "HTTPS"), true, "10.0.0.2"},
		{req("10.0.0.2:5000", "X-Forwarded-Proto", "http, https"), true, "10.0.0.2"},
		// The client wrote 1.2.3.4 itself; the proxies appended what they saw.
		{req("10.0.0.2:5000", "X-Forwarded-For", "1.2.3.4, 198.51.100.7, 10.0.0.9"), false, "198.51.100.7"},
		{req("10.0.0.2:5000", "X-Forwarded-For", "1.2.3.4", "X-Forwarded-For", "198.51.100.7"), false, "198.51.100.7"},
		{req("10.0.0.2:5000", "X-Forwarded-For", "garbage, 10.0.0.7"), false, "10.0.0.7"},
		{req("[fd00::5]:443", "X-Forwarded-For", "2001:db8::1", "X-Forwarded-Proto", "https"), true, "2001:db8::1"},
		{req("[::ffff:10.0.0.2]:5000", "X-Forwarded-For", "198.51.100.7"), false, "198.51.100.7"},
	} {
		if got := s.overTLS(c.r); got != c.tls {
			t.Errorf("overTLS(%s %v) = %v, want %v", c.r.RemoteAddr, c.r.Header, got, c.tls)
		}
		if got := s.clientAddr(c.r); got != c.client {
			t.Errorf("clientAddr(%s %v) = %q, want %q", c.r.RemoteAddr, c.r.Header, got, c.client)
		}
	}
	tlsReq := req("203.0.113.9:5000")
	tlsReq.TLS = &tls.ConnectionState{}
	if !s.overTLS(tlsReq) || s.scheme(tlsReq) != "https" {
		t.Error("a TLS connection is not over TLS")
	}
	if none := (&Server{}); none.overTLS(req("10.0.0.2:5000", "X-Forwarded-Proto", "https")) {
		t.Error("X-Forwarded-Proto believed with no trusted proxy")
	}
}

// Behind a trusted proxy that says https, the server sends HSTS and makes the
// session cookie Secure, and the UI's Origin check wants an https Origin; from
// an address it does not trust, the same headers change nothing.
func TestBehindTLSProxy(t *testing.T) {
	t.Parallel()
	trusted := newEnv(t, storeURLs(t)["sqlite"](t), func(c *Config) { c.TrustedProxies = mustPrefixes(t, "127.0.0.0/8") })
	untrusted := newEnv(t, storeURLs(t)["sqlite"](t), func(c *Config) { c.TrustedProxies = mustPrefixes(t, "10.0.0.0/8") })
	https := "https://" + strings.TrimPrefix(trusted.base, "http://")
	for _, c := range []struct {
		e      *env
		secure bool
	}{{trusted, true}, {untrusted, false}} {
		r := c.e.do("GET", "/healthz", "", nil, "X-Forwarded-Proto", "https")
		if got := r.header.Get("Strict-Transport-Security") != ""; got != c.secure {
			t.Errorf("HSTS sent: %v, want %v (%q)", got, c.secure, r.header.Get("Strict-Transport-Security"))
		}
		origin := strings.Replace(c.e.base, "http://", map[bool]string{true: "https://", false: "http://"}[c.secure], 1)
		r = c.e.signIn("reader", "Origin", origin, "X-Forwarded-Proto", "https")
		if r.status != 303 {
			t.Fatalf("sign-in: %d %s", r.status, r.body)
		}
		ck := (&http.Response{Header: r.header}).Cookies()
		if len(ck) != 1 || ck[0].Name != sessionCookie || ck[0].Secure != c.secure || !ck[0].HttpOnly || ck[0].SameSite != http.SameSiteStrictMode {
			t.Errorf("session cookie %+v, want Secure %v", ck, c.secure)
		}
	}
	// Without the proxy's word, the server is plain HTTP: no HSTS, and an
	// https Origin is another origin.
	if r := trusted.do("GET", "/healthz", "", nil); r.header.Get("Strict-Transport-Security") != "" {
		t.Error("HSTS over plain HTTP")
	}
	login := func(origin, proto string) *resp {
		return trusted.signIn("reader", "Origin", origin, "X-Forwarded-Proto", proto)
	}
	login(trusted.base, "https").want(t, 403) // an http page posting to the https site
	login(https, "http").want(t, 403)         // and the other way round
	login(https, "https").want(t, 303)
}

// signIn posts the sign-in form with token and the headers given, and returns
// the answer (not following its redirect).
func (e *env) signIn(token string, hdr ...string) *resp {
	e.t.Helper()
	req, _ := http.NewRequest("POST", e.base+"/ui/login", strings.NewReader(url.Values{"token": {token}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	res, err := c.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	return readResp(e.t, res)
}

// Behind a trusted proxy, the audit entry and the access log line of a request
// name the client's address from X-Forwarded-For; from an address not
// trusted, the header is ignored.
func TestClientAddrInAuditAndAccessLog(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		proxies string
		want    string
	}{{"127.0.0.0/8", "198.51.100.7"}, {"10.0.0.0/8", "127.0.0.1"}} {
		var logs lockedBuffer
		e := newEnv(t, storeURLs(t)["sqlite"](t), func(cfg *Config) {
			cfg.TrustedProxies = mustPrefixes(t, c.proxies)
			cfg.Logger = slog.New(slog.NewJSONHandler(&logs, nil))
		})
		r := e.do("POST", "/v1/namespaces/default/runs", "producer", map[string]any{"workflow": "await-go"},
			"X-Forwarded-For", "1.2.3.4, 198.51.100.7").want(t, 201)
		id := r.header.Get(RequestIDHeader)
		en := e.auditLog()[id]
		if en == nil || en.Source != c.want {
			t.Errorf("trusting %s: audit entry %+v, want source %s", c.proxies, en, c.want)
		}
		if !strings.Contains(logs.String(), `"request_id":"`+id+`","source":"`+c.want+`"`) {
			t.Errorf("trusting %s: no access line of %s with source %s:\n%s", c.proxies, id, c.want, logs.String())
		}
	}
}
