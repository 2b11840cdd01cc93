package server

import (
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// A server behind a reverse proxy or load balancer that terminates TLS sees
// plain HTTP from the proxy's address. The proxy says what it saw in
// X-Forwarded-Proto (the client's scheme) and X-Forwarded-For (the client's
// address, then each proxy's, left to right). Anyone can send those headers,
// so the server honours them only on a connection from an address of
// Config.TrustedProxies (`trellis server --trusted-proxy CIDR`).

// hstsValue is the Strict-Transport-Security of an answer over TLS: browsers
// that saw it use https for this host for a year. It names no subdomains, which
// may serve other things.
const hstsValue = "max-age=31536000"

// trustedPeer reports whether the connection of r comes from a trusted proxy.
func (s *Server) trustedPeer(r *http.Request) bool {
	if len(s.cfg.TrustedProxies) == 0 {
		return false
	}
	ip, ok := remoteIP(r.RemoteAddr)
	return ok && s.trusted(ip)
}

// trusted reports whether ip is an address of a trusted proxy.
func (s *Server) trusted(ip netip.Addr) bool {
	ip = ip.Unmap()
	for _, p := range s.cfg.TrustedProxies {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

// overTLS reports whether the client reached the server over TLS: the
// connection is TLS, or it comes from a trusted proxy whose
// X-Forwarded-Proto says https. Of a list (proxies appending), the last
// value counts: the one the proxy next to the server wrote.
func (s *Server) overTLS(r *http.Request) bool {
	if r.TLS != nil {
		return true
	}
	if !s.trustedPeer(r) {
		return false
	}
	vs := r.Header.Values("X-Forwarded-Proto")
	if len(vs) == 0 {
		return false
	}
	last := vs[len(vs)-1]
	if i := strings.LastIndexByte(last, ','); i >= 0 {
		last = last[i+1:]
	}
	return strings.EqualFold(strings.TrimSpace(last), "https")
}

// scheme is the scheme the client used: https when overTLS, else http.
func (s *Server) scheme(r *http.Request) string {
	if s.overTLS(r) {
		return "https"
	}
	return "http"
}

// clientAddr is the address of the client that sent r (an IP address, no
// port): the connection's peer, or, when the peer is a trusted proxy, the
// address X-Forwarded-For gives for the first hop that is not a trusted proxy,
// read from the right (the left part is whatever the client sent). A malformed
// entry stops the walk at the last trusted address.
func (s *Server) clientAddr(r *http.Request) string {
	peer, ok := remoteIP(r.RemoteAddr)
	if !ok {
		return r.RemoteAddr
	}
	if !s.trusted(peer) {
		return peer.String()
	}
	hops := forwardedFor(r.Header.Values("X-Forwarded-For"))
	addr := peer
	for i := len(hops) - 1; i >= 0; i-- {
		ip, err := netip.ParseAddr(strings.TrimSpace(hops[i]))
		if err != nil {
			break
		}
		addr = ip.Unmap()
		if !s.trusted(addr) {
			break
		}
	}
	return addr.String()
}

// forwardedFor splits X-Forwarded-For headers into their addresses, left to
// right.
func forwardedFor(vs []string) []string {
	var hops []string
	for _, v := range vs {
		hops = append(hops, strings.Split(v, ",")...)
	}
	return hops
}

// remoteIP is the IP address of a RemoteAddr (host:port).
func remoteIP(remote string) (netip.Addr, bool) {
	host, _, err := net.SplitHostPort(remote)
	if err != nil {
		host = remote
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return netip.Addr{}, false
	}
	return ip.Unmap(), true
}

// ParseTrustedProxy parses a --trusted-proxy value: a CIDR prefix
// (10.0.0.0/8, fd00::/8) or a single address (a /32 or /128).
func ParseTrustedProxy(v string) (netip.Prefix, error) {
	v = strings.TrimSpace(v)
	if strings.Contains(v, "/") {
		p, err := netip.ParsePrefix(v)
		if err != nil {
			return netip.Prefix{}, err
		}
		return p.Masked(), nil
	}
	ip, err := netip.ParseAddr(v)
	if err != nil {
		return netip.Prefix{}, err
	}
	ip = ip.Unmap()
	return netip.PrefixFrom(ip, ip.BitLen()), nil
}
