package server

import (
	"fmt"
	"mime"
	"net"
	"net/http"
	"net/netip"
	"strings"

	"github.com/trellis-dev/trellis/internal/gen/trellis/worker/v1/workerv1connect"
)

// Dev mode (Config.Insecure, `trellis server --insecure`, `trellis dev`) has no
// authentication: whoever reaches the port is an admin of every namespace. It
// listens on loopback only (Config.validate), but the developer's browser is on
// loopback too, and any web page it opens may send requests there:
//
//   - a page of another site may POST to http://127.0.0.1:7070/... without a
//     preflight, when the request is "simple" (a form's content types, or none);
//   - with DNS rebinding, a page of attacker.example whose name now points at
//     127.0.0.1 is same-origin with the server for the browser, and reads what
//     it likes.
//
// So an insecure server answers only requests whose Host is a loopback name or
// address (the browser sends the page's own name), and refuses a
// state-changing request that a browser sent cross-site (Origin,
// Sec-Fetch-Site) or that a browser could send without a preflight: to the
// JSON API, one without Content-Type application/json; to the worker
// protocol, one without a Connect or gRPC content type. The web UI's forms
// keep working: they are same-origin, and carry the session's CSRF token
// (prepareUI).

// workerPathPrefix starts the paths of the worker protocol.
const workerPathPrefix = "/" + workerv1connect.WorkerServiceName + "/"

// protect comes before the routes (within front: the request has its ID and
// its access log line): Strict-Transport-Security on an answer over TLS, and
// dev mode's checks.
func (s *Server) protect(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.overTLS(r) {
			w.Header().Set("Strict-Transport-Security", hstsValue)
		}
		if s.cfg.Insecure {
			if err := s.checkDevRequest(r); err != nil {
				s.writeError(w, r, err)
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// checkDevRequest is dev mode's refusal of requests a web page could make.
func (s *Server) checkDevRequest(r *http.Request) error {
	if !loopbackHost(r.Host) {
		return fmt.Errorf("%w: Host %q is not a loopback name or address: an --insecure server answers only "+
			"localhost, 127.0.0.1 and [::1], so that a web page cannot reach it under a name of its own (DNS rebinding)",
			ErrPermissionDenied, r.Host)
	}
	if !stateChanging(r.Method) {
		return nil
	}
	if err := s.checkSameSite(r); err != nil {
		return err
	}
	return checkDevContentType(r)
}

// loopbackHost reports whether a Host header names a loopback address:
// localhost, or an IP address on loopback, with or without a port.
func loopbackHost(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	} else if strings.HasPrefix(host, "[") && strings.HasSuffix(host, "]") {
		host = host[1 : len(host)-1]
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Zone() == "" && ip.Unmap().IsLoopback()
}

// stateChanging reports whether a method changes state.
func stateChanging(method string) bool {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return false
	}
	return true
}

// checkSameSite refuses a request a browser sent from another site: its
// Sec-Fetch-Site says cross-site or same-site (another port or subdomain), or
// its Origin is not this server's. A request with neither header comes from
// no browser (a browser sends Origin with every POST, PUT, PATCH and DELETE).
func (s *Server) checkSameSite(r *http.Request) error {
	switch site := r.Header.Get("Sec-Fetch-Site"); site {
	case "", "same-origin", "none":
	default:
		return fmt.Errorf("%w: cross-site request refused by an --insecure server (Sec-Fetch-Site: %s)", ErrPermissionDenied, site)
	}
	if origin := r.Header.Get("Origin"); origin != "" && !sameOrigin(origin, s.scheme(r), r.Host) {
		return fmt.Errorf("%w: cross-site request refused by an --insecure server (Origin %q, this server %s://%s)",
			ErrPermissionDenied, origin, s.scheme(r), r.Host)
	}
	return nil
}

// checkDevContentType refuses a state-changing request whose content type a
// web page may send without a preflight: the JSON API takes application/json
// only (a body or not), the worker protocol its Connect and gRPC types. The
// web UI's forms are left to its CSRF check.
func checkDevContentType(r *http.Request) error {
	ct := r.Header.Get("Content-Type")
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		mt = ""
	}
	switch {
	case strings.HasPrefix(r.URL.Path, "/ui/"):
		return nil
	case strings.HasPrefix(r.URL.Path, workerPathPrefix):
		if workerContentType(mt) {
			return nil
		}
		return fmt.Errorf("%w: an --insecure server takes worker protocol calls with a Connect or gRPC content type "+
			"(application/proto, application/connect+proto, application/grpc, ...), not %q", ErrUnsupportedMediaType, ct)
	case mt == "application/json":
		return nil
	}
	return fmt.Errorf("%w: an --insecure server takes %s requests with Content-Type: application/json only, a body or not "+
		"(a web page cannot send that without the browser asking first), not %q", ErrUnsupportedMediaType, r.Method, ct)
}

// workerContentType reports whether mt is a content type of the worker
// protocol (Connect or gRPC), which no browser sends cross-site without a
// preflight.
func workerContentType(mt string) bool {
	switch mt {
	case "application/proto", "application/json", "application/connect+proto", "application/connect+json":
		return true
	}
	return mt == "application/grpc" || strings.HasPrefix(mt, "application/grpc+") || strings.HasPrefix(mt, "application/grpc-web")
}
