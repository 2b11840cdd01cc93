package server

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509/pkix"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/trellis-dev/trellis"
	"github.com/trellis-dev/trellis/internal/auth/storeauth"
	pb "github.com/trellis-dev/trellis/internal/gen/trellis/worker/v1"
	"github.com/trellis-dev/trellis/internal/gen/trellis/worker/v1/workerv1connect"
	"github.com/trellis-dev/trellis/internal/testcerts"
	"github.com/trellis-dev/trellis/store"
)

// tlsEnv is a server listening with TLS and mutual TLS on a fresh SQLite store
// whose tokens authenticate, with no worker of its own.
type tlsEnv struct {
	t        *testing.T
	srv      *Server
	st       store.Store
	base     string
	ca       *testcerts.CA // signs the server's certificate and the clients'
	root     string        // the bootstrap admin's secret
	certFile string
	keyFile  string
}

func newTLSEnv(t *testing.T) *tlsEnv {
	t.Helper()
	dir := t.TempDir()
	st, err := trellis.OpenStore(context.Background(), "sqlite://"+filepath.Join(dir, "t.db"), time.Now)
	if err != nil {
		t.Fatal(err)
	}
	e := &tlsEnv{t: t, st: st, ca: testcerts.NewCA(t, "test CA")}
	certPEM, keyPEM := e.ca.Server(t, "server one")
	e.certFile, e.keyFile = testcerts.Write(t, dir, "server.crt", certPEM), testcerts.Write(t, dir, "server.key", keyPEM)
	srv := startServer(t, Config{Backend: st, Listen: "127.0.0.1:0",
		TLSCertFile: e.certFile, TLSKeyFile: e.keyFile, ClientCAFile: testcerts.Write(t, dir, "ca.crt", e.ca.PEM),
		Authenticator: storeauth.New(st, storeauth.Config{}), MaxWait: 10 * time.Second})
	e.srv, e.base = srv, srv.URL()
	if e.root, err = srv.BootstrapAdmin(context.Background()); err != nil || e.root == "" {
		t.Fatalf("bootstrap: %q %v", e.root, err)
	}
	return e
}

// tlsConfig trusts the test CA and presents certs.
func (e *tlsEnv) tlsConfig(certs ...tls.Certificate) *tls.Config {
	return &tls.Config{RootCAs: e.ca.Pool(), Certificates: certs}
}

// client is an HTTPS client (HTTP/2 when the server offers it) presenting certs.
func (e *tlsEnv) client(certs ...tls.Certificate) *http.Client {
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: e.tlsConfig(certs...), ForceAttemptHTTP2: true}}
	e.t.Cleanup(c.CloseIdleConnections)
	return c
}

// do sends a request through c with a bearer token ("" for none).
func (e *tlsEnv) do(c *http.Client, method, path, token string, body any) (*resp, error) {
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, e.base+path, rd)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	r := readResp(e.t, res)
	r.header.Set("X-Test-Proto", res.Proto)
	return r, nil
}

func (e *tlsEnv) must(c *http.Client, method, path, token string, body any) *resp {
	e.t.Helper()
	r, err := e.do(c, method, path, token, body)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	return r
}

// createToken creates a token through the API as the admin.
func (e *tlsEnv) createToken(body map[string]any) {
	e.t.Helper()
	e.must(e.client(), "POST", "/v1/tokens", e.root, body).want(e.t, 201)
}

// The API over HTTPS: HTTP/2, HSTS, bearer tokens as over HTTP; a plain HTTP
// request to the TLS port gets no answer of the API.
func TestTLSServesHTTPS(t *testing.T) {
	t.Parallel()
	e := newTLSEnv(t)
	if !strings.HasPrefix(e.base, "https://") || !e.srv.TLS() {
		t.Fatalf("URL %s, TLS %v", e.base, e.srv.TLS())
	}
	c := e.client()
	r := e.must(c, "GET", "/healthz", "", nil).want(t, 200)
	if r.header.Get("X-Test-Proto") != "HTTP/2.0" || r.header.Get("Strict-Transport-Security") != hstsValue {
		t.Errorf("healthz over TLS: %s, HSTS %q; want HTTP/2.0 and %q", r.header.Get("X-Test-Proto"), r.header.Get("Strict-Transport-Security"), hstsValue)
	}
	e.must(c, "GET", "/v1/tokens", e.root, nil).want(t, 200)
	e.must(c, "GET", "/v1/tokens", "", nil).problem(t, 401, "unauthenticated")
	res, err := http.Get("http://" + e.srv.Addr().String() + "/healthz")
	if err == nil {
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode == 200 {
			t.Errorf("plain HTTP to the TLS port answered 200: %s", body)
		}
	}
	if _, err := e.do(&http.Client{}, "GET", "/healthz", "", nil); err == nil {
		t.Error("a client that does not trust the test CA connected")
	}
}

// Mutual TLS: a worker holding only a certificate whose subject a token holds
// claims and completes a run through the worker protocol; a certificate of an
// unknown subject is refused 401, one from another CA at the handshake; a
// bearer token, when sent, wins over the certificate; revoking the token
// disables its subject at once.
func TestMutualTLSWorker(t *testing.T) {
	t.Parallel()
	e := newTLSEnv(t)
	subject := pkix.Name{CommonName: "w1", Organization: []string{"team"}}
	e.createToken(map[string]any{"name": "w1", "subject": "CN=w1,O=team",
		"grants": []map[string]any{{"role": "worker", "namespace": "default"}}})
	w1 := e.ca.ClientPair(t, subject)

	cfg := trellis.Config{Server: e.base, TLSConfig: e.tlsConfig(w1)} // no Token
	cfg.Worker.ShutdownGrace = 2 * time.Second
	w, err := trellis.NewWorker(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Register(context.Background(), echoWF); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	stopWorker := func() {
		if cancel != nil {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("worker: %v", err)
			}
			cancel = nil
		}
	}
	defer stopWorker()
	admin, err := trellis.Open(context.Background(), trellis.Config{Server: e.base, Token: e.root, TLSConfig: e.tlsConfig()})
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	h, err := trellis.Start(context.Background(), admin, echoWF, map[string]any{"hello": "tls"})
	if err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer wcancel()
	out, err := h.Result(wctx)
	if err != nil || out["hello"] != "tls" {
		t.Fatalf("result through a certificate-only worker: %v, %v", out, err)
	}
	stopWorker() // its record removed, by certificate too
	if ws, err := admin.Workers(context.Background()); err != nil || len(ws) != 0 {
		t.Errorf("workers after the worker stopped: %v, %v; want none", ws, err)
	}

	// The certificate alone stands for w1, and only for what w1 may do.
	byCert := e.client(w1)
	e.must(byCert, "GET", "/v1/namespaces/default/runs", "", nil).problem(t, 403, "permission_denied")
	wc := workerv1connect.NewWorkerServiceClient(byCert, e.base)
	if _, err := wc.ListWorkers(context.Background(), connect.NewRequest(&pb.ListWorkersRequest{Namespace: "default"})); err != nil {
		t.Errorf("worker call by certificate: %v", err)
	}
	// A bearer token wins: the admin's with w1's certificate lists tokens; a
	// wrong one is refused, never made up for by the certificate.
	e.must(byCert, "GET", "/v1/tokens", e.root, nil).want(t, 200)
	e.must(byCert, "GET", "/v1/tokens", "trl_wrong", nil).problem(t, 401, "unauthenticated")

	stranger := e.client(e.ca.ClientPair(t, pkix.Name{CommonName: "stranger"}))
	e.must(stranger, "GET", "/v1/namespaces/default/runs", "", nil).problem(t, 401, "unauthenticated")
	_, err = workerv1connect.NewWorkerServiceClient(stranger, e.base).
		ListWorkers(context.Background(), connect.NewRequest(&pb.ListWorkersRequest{Namespace: "default"}))
	if connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Errorf("worker call by a certificate of an unknown subject: %v, want unauthenticated", err)
	}

	// A certificate from another CA, sent although the server asks for its
	// own CA's (a Go client would send none), fails the handshake: the server
	// answers the certificate with an alert, and no request gets through.
	if err := dialWithForeignCert(t, e.srv.Addr().String(), subject); err == nil ||
		!strings.Contains(err.Error(), "remote error: tls") {
		t.Errorf("a certificate from another CA: %v, want the server's TLS alert", err)
	}

	// A stream the certificate opened ends when its token is revoked.
	subEnded := make(chan error, 1)
	sub, err := wc.Subscribe(context.Background(), connect.NewRequest(&pb.SubscribeRequest{Namespace: "default", Topic: store.TopicCancel}))
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for sub.Receive() {
		}
		subEnded <- sub.Err()
		sub.Close()
	}()
	e.must(e.client(), "POST", "/v1/tokens/w1/revoke", e.root, nil).want(t, 200)
	select {
	case err := <-subEnded:
		if connect.CodeOf(err) != connect.CodeUnauthenticated {
			t.Errorf("the certificate's Subscribe stream ended with %v, want unauthenticated", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the certificate's Subscribe stream did not end within 10s of its token's revocation")
	}
	_, err = wc.ListWorkers(context.Background(), connect.NewRequest(&pb.ListWorkersRequest{Namespace: "default"}))
	if connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Errorf("worker call by the certificate of a revoked token: %v, want unauthenticated", err)
	}
}

// dialWithForeignCert connects presenting a certificate of subject from
// another CA, always, sends a request and returns the error of reading its
// answer (TLS 1.3 tells the client of a refused certificate after its side
// of the handshake: at its first read).
func dialWithForeignCert(t *testing.T, addr string, subject pkix.Name) error {
	pair := testcerts.NewCA(t, "another CA").ClientPair(t, subject)
	conn, err := tls.Dial("tcp", addr, &tls.Config{
		InsecureSkipVerify:   true, // the server's certificate is not what this test is about
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &pair, nil },
	})
	if err != nil {
		return err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := conn.Write([]byte("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")); err != nil {
		return err
	}
	_, err = conn.Read(make([]byte, 1))
	return err
}

// ReloadTLS serves new connections the files' new certificate; a failed
// reload keeps the old one.
func TestReloadTLS(t *testing.T) {
	t.Parallel()
	e := newTLSEnv(t)
	served := func() string {
		t.Helper()
		conn, err := tls.Dial("tcp", e.srv.Addr().String(), e.tlsConfig())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0].Subject.CommonName
	}
	if cn := served(); cn != "server one" {
		t.Fatalf("served %q, want server one", cn)
	}
	certPEM, keyPEM := e.ca.Server(t, "server two")
	replace(t, e.certFile, certPEM)
	replace(t, e.keyFile, keyPEM)
	if err := e.srv.ReloadTLS(); err != nil {
		t.Fatal(err)
	}
	if cn := served(); cn != "server two" {
		t.Fatalf("after a reload: %q, want server two", cn)
	}
	replace(t, e.keyFile, []byte("not a key"))
	if err := e.srv.ReloadTLS(); err == nil || !strings.Contains(err.Error(), "previous certificate stays") {
		t.Fatalf("reload of a broken key: %v, want an error", err)
	}
	if cn := served(); cn != "server two" {
		t.Fatalf("after a failed reload: %q, want server two still", cn)
	}
}

// replace writes data to path through a rename, as certificate tools do.
func replace(t *testing.T, path string, data []byte) {
	t.Helper()
	tmp := path + ".new"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// The TLS configuration is checked at New: files that go together, a client
// CA only with TLS and with an Authenticator that maps subjects.
func TestTLSConfigValidated(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca := testcerts.NewCA(t, "ca")
	certPEM, keyPEM := ca.Server(t, "s")
	cert, key := testcerts.Write(t, dir, "s.crt", certPEM), testcerts.Write(t, dir, "s.key", keyPEM)
	caFile := testcerts.Write(t, dir, "ca.crt", ca.PEM)
	notPEM := testcerts.Write(t, dir, "x", []byte("hello"))
	for name, c := range map[string]struct {
		cfg  Config
		want string
	}{
		"cert without key":       {Config{TLSCertFile: cert}, "go together"},
		"key without cert":       {Config{TLSKeyFile: key}, "go together"},
		"client CA without TLS":  {Config{ClientCAFile: caFile}, "needs TLS"},
		"client CA and insecure": {Config{TLSCertFile: cert, TLSKeyFile: key, ClientCAFile: caFile, Insecure: true}, "Insecure"},
		"missing cert file":      {Config{TLSCertFile: filepath.Join(dir, "none"), TLSKeyFile: key}, "loading TLS certificate"},
		"client CA not PEM":      {Config{TLSCertFile: cert, TLSKeyFile: key, ClientCAFile: notPEM}, "no PEM certificate"},
		"fixed tokens and a client CA": {Config{TLSCertFile: cert, TLSKeyFile: key, ClientCAFile: caFile, Authenticator: testTokens()},
			"maps certificate subjects"},
	} {
		c.cfg.Backend = nil
		c.cfg.Store = "sqlite://" + filepath.Join(t.TempDir(), "t.db")
		srv, err := New(context.Background(), c.cfg)
		if err == nil {
			srv.Shutdown(context.Background())
		}
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: New = %v, want an error with %q", name, err, c.want)
		}
	}
}
