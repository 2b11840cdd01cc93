package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"os"
	"sync/atomic"

	"github.com/trellis-dev/trellis/internal/auth"
)

// TLS and mutual TLS (docs/security.md, "TLS and mutual TLS"). The server's
// certificate, key and client CA are read from files at New and again at each
// ReloadTLS; each handshake takes the configuration loaded last
// (tls.Config.GetConfigForClient), so a reload needs no restart and drops no
// connection. A client certificate is verified when presented
// (tls.VerifyClientCertIfGiven: clients with a bearer token and none still
// connect); its Subject then stands for the token holding it, when the request
// carries no bearer token (authenticate).

// tlsFiles are the files of a TLS configuration.
type tlsFiles struct {
	cert, key, clientCA string
}

// tlsState holds the configuration each handshake uses.
type tlsState struct {
	files   tlsFiles
	current atomic.Pointer[tls.Config]
}

// newTLSState loads the files; nil when the server serves no TLS.
func newTLSState(cfg Config) (*tlsState, error) {
	if cfg.TLSCertFile == "" {
		return nil, nil
	}
	st := &tlsState{files: tlsFiles{cert: cfg.TLSCertFile, key: cfg.TLSKeyFile, clientCA: cfg.ClientCAFile}}
	if err := st.reload(); err != nil {
		return nil, fmt.Errorf("server config: %w", err)
	}
	return st, nil
}

// reload reads the files again and, when they make a valid configuration, uses
// it for the handshakes from now on; else it keeps the current one.
func (st *tlsState) reload() error {
	pair, err := tls.LoadX509KeyPair(st.files.cert, st.files.key)
	if err != nil {
		return fmt.Errorf("loading TLS certificate %s and key %s: %w", st.files.cert, st.files.key, err)
	}
	c := &tls.Config{
		Certificates: []tls.Certificate{pair},
		MinVersion:   tls.VersionTLS12,
		// h2 first: gRPC workers need HTTP/2; browsers and curl take either.
		NextProtos: []string{"h2", "http/1.1"},
	}
	if st.files.clientCA != "" {
		pem, err := os.ReadFile(st.files.clientCA)
		if err != nil {
			return fmt.Errorf("loading client CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return fmt.Errorf("loading client CA %s: no PEM certificate in it", st.files.clientCA)
		}
		c.ClientCAs, c.ClientAuth = pool, tls.VerifyClientCertIfGiven
		// A resumed session keeps the chain verified at its first handshake,
		// against the CA of then: without tickets, a client CA removed by a
		// reload stops every certificate it signed on the next connection.
		c.SessionTicketsDisabled = true
	}
	st.current.Store(c)
	return nil
}

// serverConfig is the http.Server's TLS configuration: each handshake takes
// the one loaded last.
func (st *tlsState) serverConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"h2", "http/1.1"},
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return st.current.Load(), nil
		},
	}
}

// ReloadTLS reads the TLS certificate, key and client CA files again and uses
// them for new connections; on an error it keeps the ones it had (`trellis
// server` calls it on SIGHUP). Without TLS it does nothing.
func (s *Server) ReloadTLS() error {
	if s.tls == nil {
		return nil
	}
	if err := s.tls.reload(); err != nil {
		return fmt.Errorf("reloading TLS (the previous certificate stays in use): %w", err)
	}
	return nil
}

// TLS reports whether the server serves HTTPS.
func (s *Server) TLS() bool { return s.tls != nil }

// URL is the server's base URL once started ("https://127.0.0.1:7070"), "" before.
func (s *Server) URL() string {
	addr := s.Addr()
	if addr == nil {
		return ""
	}
	if s.tls != nil {
		return "https://" + addr.String()
	}
	return "http://" + addr.String()
}

// certSubjectKey is the context key of a request's verified client certificate
// subject.
type certSubjectKey struct{}

// certSubject returns the Subject (RFC 2253, x509 Name.String()) of the request's
// client certificate when one was presented and verified against the client CA.
func certSubject(ctx context.Context) (string, bool) {
	s, ok := ctx.Value(certSubjectKey{}).(string)
	return s, ok
}

// clientCert puts the subject of a verified client certificate in the
// request's context, where authenticate finds it (the worker protocol's
// handlers and a stream's later checks included). Answers over TLS get HSTS
// from protect (proxy.go), as those through a trusted proxy do.
func (s *Server) clientCert(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS != nil && len(r.TLS.VerifiedChains) > 0 && len(r.TLS.PeerCertificates) > 0 {
			subject := r.TLS.PeerCertificates[0].Subject.String()
			r = r.WithContext(context.WithValue(r.Context(), certSubjectKey{}, subject))
		}
		next.ServeHTTP(w, r)
	})
}

// authenticateCert finds the principal of the request's verified client
// certificate (mutual TLS).
func (s *Server) authenticateCert(ctx context.Context, subject string) (*auth.Principal, error) {
	sa, ok := s.cfg.Authenticator.(auth.SubjectAuthenticator)
	if !ok {
		return nil, fmt.Errorf("%w: this server maps no certificate to a principal: send Authorization: Bearer <token>", auth.ErrUnauthenticated)
	}
	p, err := sa.AuthenticateSubject(ctx, subject)
	switch {
	case errors.Is(err, auth.ErrUnauthenticated):
		return nil, fmt.Errorf("%w: no live token holds the client certificate's subject %q", auth.ErrUnauthenticated, subject)
	case errors.Is(err, ErrRateLimited): // unknownLookups
		return nil, err
	case err != nil:
		return nil, fmt.Errorf("%w: authenticating: %v", ErrUnavailable, err)
	case p == nil:
		return nil, fmt.Errorf("%w: unknown certificate subject", auth.ErrUnauthenticated)
	}
	notePrincipal(ctx, p.Name)
	return p, nil
}
