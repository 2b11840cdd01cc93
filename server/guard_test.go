package server

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"
)

// raw sends req as it is on a new connection to the server and reads the
// answer: what a client that cleans nothing (curl --path-as-is, a script)
// gets.
func (e *env) raw(req string) (*http.Response, []byte) {
	e.t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(e.base, "http://"))
	if err != nil {
		e.t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second)) // a bound for a broken server, not a measurement
	go io.WriteString(conn, req)                       // a large header is still being written as the answer comes
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		e.t.Fatalf("reading the answer to %.80q: %v", req, err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		e.t.Fatalf("reading the answer to %.80q: %v", req, err)
	}
	return res, body
}

// wantProblem checks a raw answer: status, problem+json, code, no redirect.
func wantProblem(t *testing.T, what string, res *http.Response, body []byte, status int, code string) Problem {
	t.Helper()
	var p Problem
	if res.StatusCode != status || res.Header.Get("Content-Type") != "application/problem+json" || res.Header.Get("Location") != "" {
		t.Fatalf("%s: %d %s (Location %q) %s, want %d problem+json", what, res.StatusCode, res.Header.Get("Content-Type"),
			res.Header.Get("Location"), body, status)
	}
	if err := json.Unmarshal(body, &p); err != nil || p.Code != code || p.Status != status {
		t.Fatalf("%s: problem %s (%v), want code %s", what, body, err, code)
	}
	return p
}

// Paths that are not clean are refused as problem+json, not redirected by the
// ServeMux (301 with a text/html body, which many clients follow as a GET);
// nor is the worker protocol's root redirected to its subtree.
func TestUncleanPathsAreRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t, storeURLs(t)["sqlite"](t))
	for _, c := range []struct {
		method, path string
		status       int
		code         string
	}{
		{"GET", "//v1/namespaces", 400, "invalid_argument"},
		{"GET", "/v1/../v1/tokens", 400, "invalid_argument"},
		{"POST", "/v1/../v1/tokens", 400, "invalid_argument"},
		{"GET", "/v1/./namespaces", 400, "invalid_argument"},
		{"GET", "/v1/namespaces/default/runs/x/..", 400, "invalid_argument"},
		{"GET", "/%2e%2e/v1/tokens", 400, "invalid_argument"},
		{"GET", "/ui//default/runs", 400, "invalid_argument"},
		{"GET", "/v1/namespaces/default//runs", 400, "invalid_argument"},
		{"GET", "/trellis.worker.v1.WorkerService", 404, "route_not_found"},
		{"POST", "/trellis.worker.v1.WorkerService", 404, "route_not_found"},
		{"GET", "/v1/namespaces/default/runs/", 404, "route_not_found"}, // clean: a path no route has
	} {
		req := c.method + " " + c.path + " HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer admin\r\nContent-Length: 0\r\n\r\n"
		res, body := e.raw(req)
		p := wantProblem(t, c.method+" "+c.path, res, body, c.status, c.code)
		if c.status == 400 && !strings.Contains(p.Detail, "canonical form") {
			t.Errorf("%s %s: detail %q does not say why", c.method, c.path, p.Detail)
		}
	}
	// Every route, and every page of the UI, refuses its path made unclean.
	for _, pattern := range allPatterns() {
		path := strings.TrimSuffix(fillPattern(pattern, "x"), "/") // "" for the root
		for _, bad := range []string{"//" + strings.TrimPrefix(path, "/"), path + "/.", path + "/x/.."} {
			e.do("GET", bad, "admin", nil).problem(t, 400, "invalid_argument")
		}
	}
}

// An encoded slash in a path segment is refused by every route alike, before
// the route is looked for: it is not decoded into a name that holds a '/' (the
// token routes did), nor routed as two segments.
func TestEncodedSlashIsRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t, storeURLs(t)["sqlite"](t))
	walked := 0
	for _, pattern := range allPatterns() {
		var paths []string
		if strings.Contains(pattern, "{") {
			paths = []string{wildcard.ReplaceAllString(pattern, "a%2Fb"), wildcard.ReplaceAllString(pattern, "a%2fb")}
		} else {
			paths = []string{pattern + "%2Fx"} // "/%2Fx" for the root
			if pattern != "/" {
				paths = append(paths, pattern+"%2F")
			}
		}
		for _, path := range paths {
			for _, method := range []string{"GET", "POST"} {
				p := e.do(method, path, "admin", nil).problem(t, 400, "invalid_argument")
				if !strings.Contains(p.Detail, "encoded slash") {
					t.Errorf("%s %s: detail %q", method, path, p.Detail)
				}
				walked++
			}
		}
	}
	if walked < 2*len(routeTable) {
		t.Fatalf("walked %d requests for %d routes", walked, len(routeTable))
	}
	// The token routes, which decoded it: no token named "a/b" is revoked.
	e.do("POST", "/v1/tokens/a%2Fb/revoke", "admin", nil).problem(t, 400, "invalid_argument")
}

// A request line and header over 64 KiB is answered 431 as problem+json, by
// the server rather than by net/http (which answers text/plain), up to the
// transport's limit (128 KiB); below 64 KiB the request is served.
func TestHeaderFloodIsProblemJSON(t *testing.T) {
	t.Parallel()
	e := newEnv(t, storeURLs(t)["sqlite"](t))
	get := "GET /healthz HTTP/1.1\r\nHost: localhost\r\n"
	for _, c := range []struct {
		name   string
		header string
		status int
	}{
		{"one large header", "X-Flood: " + strings.Repeat("a", 70<<10) + "\r\n", 431},
		{"many small headers", strings.Repeat("X-Flood: "+strings.Repeat("b", 90)+"\r\n", 1000), 431},
		{"a large cookie", "Cookie: s=" + strings.Repeat("c", 120<<10) + "\r\n", 431},
		{"a long request line", "", 431},
		{"just under the limit", "X-Flood: " + strings.Repeat("d", 60<<10) + "\r\n", 200},
	} {
		req := get + c.header + "\r\n"
		if c.name == "a long request line" {
			req = "GET /healthz?" + strings.Repeat("q", 80<<10) + " HTTP/1.1\r\nHost: localhost\r\n\r\n"
		}
		res, body := e.raw(req)
		if c.status == 200 {
			if res.StatusCode != 200 {
				t.Errorf("%s: %d %s", c.name, res.StatusCode, body)
			}
			continue
		}
		p := wantProblem(t, c.name, res, body, 431, "headers_too_large")
		if !strings.Contains(p.Detail, "limit 65536") {
			t.Errorf("%s: detail %q", c.name, p.Detail)
		}
	}
	// The API's routes and the worker protocol's path alike.
	res, body := e.raw("POST /v1/namespaces/default/runs HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer producer\r\n" +
		"Content-Type: application/json\r\nX-Flood: " + strings.Repeat("e", 100<<10) + "\r\nContent-Length: 19\r\n\r\n{\"workflow\":\"echo\"}")
	wantProblem(t, "a start", res, body, 431, "headers_too_large")
	if n := e.runCount(); n != 0 {
		t.Fatalf("%d runs after a refused start", n)
	}
}

// allPatterns are the paths of every route of the API and of the UI.
func allPatterns() []string {
	var ps []string
	for _, rt := range routeTable {
		ps = append(ps, rt.pattern)
	}
	for _, rt := range uiRouteTable {
		ps = append(ps, strings.TrimSuffix(rt.pattern, "{$}"))
	}
	return ps
}

var wildcard = regexp.MustCompile(`\{[a-z]+\}`)

// fillPattern puts v in each wildcard of a route's pattern ("default" for {ns}).
func fillPattern(pattern, v string) string {
	return wildcard.ReplaceAllString(strings.ReplaceAll(pattern, "{ns}", "default"), v)
}
