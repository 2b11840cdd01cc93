package server

import (
	"fmt"
	"net/http"
	"path"
	"strings"
)

// Header limits. net/http answers a request whose header is over its
// http.Server.MaxHeaderBytes itself, in text/plain; the server gives it the
// larger transportHeaderBytes and refuses, as problem+json, a header over
// maxHeaderBytes (guard), so that every error answer has the API's shape but
// for the headers net/http stops reading. The transport's limit is what a
// connection may make the server hold before it is authenticated, so it stays
// a small multiple of the API's.
const (
	maxHeaderBytes       = 64 << 10
	transportHeaderBytes = 2 * maxHeaderBytes
)

// guard is the server's outermost handler: it refuses what no route can take,
// before a route is looked for, as problem+json (docs/http-api.md, "Errors"):
// a request line and header over maxHeaderBytes (431); a path segment holding
// an encoded slash; a path that is not clean (the ServeMux would redirect it
// with a text/html body, and a redirected POST becomes a GET in many clients).
func (s *Server) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := checkRequestForm(r); err != nil {
			s.writeError(w, r, err)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// checkRequestForm is guard's check.
func checkRequestForm(r *http.Request) error {
	if n := headerBytes(r); n > maxHeaderBytes {
		return fmt.Errorf("%w: the request line and header fields are %d bytes (limit %d)", ErrHeadersTooLarge, n, maxHeaderBytes)
	}
	if hasEncodedSlash(r.URL.EscapedPath()) {
		return fmt.Errorf("%w: path %q: an encoded slash (%%2F) in a path segment is refused, not decoded (no name or ID holds a '/')",
			ErrInvalidArgument, r.URL.EscapedPath())
	}
	if clean := cleanPath(r.URL.Path); clean != r.URL.Path {
		return fmt.Errorf("%w: path %q is not in canonical form (%q): empty, '.' and '..' segments are refused, not redirected",
			ErrInvalidArgument, r.URL.Path, clean)
	}
	return nil
}

// headerBytes counts the request line and header fields as the HTTP/1.1 wire
// has them (what http.Server.MaxHeaderBytes bounds), for HTTP/2 requests too.
func headerBytes(r *http.Request) int {
	n := len(r.Method) + len(r.RequestURI) + len(r.Proto) + 4 // "GET /x HTTP/1.1\r\n"
	n += len("Host: ") + len(r.Host) + 2
	for k, vs := range r.Header {
		for _, v := range vs {
			n += len(k) + len(v) + 4 // "k: v\r\n"
		}
	}
	return n
}

// hasEncodedSlash reports whether an escaped path holds %2F (or %2f).
func hasEncodedSlash(p string) bool {
	for i := strings.IndexByte(p, '%'); i >= 0 && i+2 < len(p); {
		if p[i+1] == '2' && (p[i+2] == 'F' || p[i+2] == 'f') {
			return true
		}
		j := strings.IndexByte(p[i+1:], '%')
		if j < 0 {
			break
		}
		i += 1 + j
	}
	return false
}

// cleanPath is the canonical form of p that http.ServeMux redirects to: p
// with path.Clean's rules, its trailing slash kept.
func cleanPath(p string) string {
	if p == "" {
		return "/"
	}
	if p[0] != '/' {
		p = "/" + p
	}
	np := path.Clean(p)
	if p[len(p)-1] == '/' && np != "/" {
		if len(p) == len(np)+1 && strings.HasPrefix(p, np) {
			return p
		}
		np += "/"
	}
	return np
}
