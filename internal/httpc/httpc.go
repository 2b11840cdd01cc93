// Package httpc is the transport of the SDK's client to a Trellis server: JSON
// requests with a bearer token, an Idempotency-Key on every mutating call (the
// same key on each retry of that call), retries of connection errors and 503s
// with backoff, and problem+json errors decoded into *Problem. It knows nothing
// of runs: the root package maps routes and codes (remote.go).
package httpc

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"go.opentelemetry.io/otel/propagation"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/google/uuid"
)

// Defaults of Config.
const (
	DefaultTimeout  = 30 * time.Second
	DefaultAttempts = 4
	DefaultBackoff  = 100 * time.Millisecond
	maxBackoff      = 2 * time.Second
	// DefaultMaxAnswer is Config.MaxAnswer's default.
	DefaultMaxAnswer = 64 << 20
)

// Config configures New.
type Config struct {
	// Base is the server's URL, e.g. "http://127.0.0.1:7070".
	Base string
	// Token is the bearer token; empty sends none.
	Token string
	// Timeout bounds one attempt of a call (a long poll adds its wait). Default 30s.
	Timeout time.Duration
	// Attempts caps the tries of one call (connection errors and 503). Default 4.
	Attempts int
	// Backoff is the first wait between tries, doubled each time. Default 100ms.
	Backoff time.Duration
	// Client is the HTTP client; default one with dial and TLS timeouts.
	Client *http.Client
	// TLSConfig configures the default client's TLS (a private CA, a client
	// certificate); ignored when Client is set.
	TLSConfig *tls.Config
	// MaxAnswer caps the body of an answer read, in bytes; a longer one is an
	// error. Default DefaultMaxAnswer (a run's input and output at the
	// default payload limit fit many times).
	MaxAnswer int64
}

// Client calls one server. It is safe for concurrent use.
type Client struct {
	cfg  Config
	base *url.URL
}

// Problem is a problem+json answer of the server (docs/http-api.md).
type Problem struct {
	Status int    `json:"status"`
	Code   string `json:"code"`
	Title  string `json:"title"`
	Detail string `json:"detail"`
}

func (p *Problem) Error() string {
	if p.Detail != "" {
		return p.Detail
	}
	return fmt.Sprintf("%s (HTTP %d)", p.Title, p.Status)
}

// New checks cfg and returns a client.
func New(cfg Config) (*Client, error) {
	u, err := url.Parse(strings.TrimRight(cfg.Base, "/"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("server URL %q: want http://host:port or https://host:port", cfg.Base)
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.Attempts <= 0 {
		cfg.Attempts = DefaultAttempts
	}
	if cfg.Backoff <= 0 {
		cfg.Backoff = DefaultBackoff
	}
	if cfg.Client == nil {
		cfg.Client = defaultHTTPClient(cfg.TLSConfig)
	}
	return &Client{cfg: cfg, base: u}, nil
}

func defaultHTTPClient(tc *tls.Config) *http.Client {
	d := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}
	t := &http.Transport{
		Proxy: http.ProxyFromEnvironment, DialContext: d.DialContext,
		TLSHandshakeTimeout: 10 * time.Second, IdleConnTimeout: 90 * time.Second,
		MaxIdleConnsPerHost: 64, ForceAttemptHTTP2: true,
	}
	if tc != nil {
		t.TLSClientConfig = tc.Clone()
	}
	return &http.Client{Transport: t} // per-call timeouts come from the context
}

// Close closes the idle keep-alive connections; calls after it still work (the
// caller refuses them).
func (c *Client) Close() {
	c.cfg.Client.CloseIdleConnections()
}

// Call is one request: Method, Path (already escaped), Query, Body (JSON-encoded
// when not nil), Out (decoded from a 2xx answer when not nil) and Wait (added to
// the attempt's timeout, for long polls).
type Call struct {
	Method string
	Path   string
	Query  url.Values
	Body   any
	Out    any
	Wait   time.Duration
	// Attempts, when above 0, caps the tries of this call instead of
	// Config.Attempts (a waiter that should ride out a server restart).
	Attempts int
}

// Do makes the call, retrying what is safe to retry, and returns the status of
// a 2xx answer, or a *Problem, or a transport error.
func (c *Client) Do(ctx context.Context, call Call) (int, error) {
	var body []byte
	if call.Body != nil {
		b, err := json.Marshal(call.Body)
		if err != nil {
			return 0, fmt.Errorf("encoding request: %w", err)
		}
		body = b
	}
	key := ""
	if call.Method != http.MethodGet {
		// One key for every try of this call. Version 7 (time first): the
		// store indexes keys, and keys made in time order land at the end of
		// the index instead of on a random page of it each, which made a
		// commit of a batch of starts write a page per key.
		key = uuid.Must(uuid.NewV7()).String()
	}
	backoff, attempts := c.cfg.Backoff, c.cfg.Attempts
	if call.Attempts > 0 {
		attempts = call.Attempts
	}
	for attempt := 1; ; attempt++ {
		status, retry, err := c.once(ctx, call, body, key)
		if !retry || attempt >= attempts || ctx.Err() != nil {
			return status, err
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return status, err
		case <-t.C:
		}
		backoff = min(2*backoff, maxBackoff)
	}
}

// once makes one try and says whether another may follow.
func (c *Client) once(ctx context.Context, call Call, body []byte, key string) (int, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout+call.Wait)
	defer cancel()
	req, err := c.request(ctx, call, body, key)
	if err != nil {
		return 0, false, err
	}
	resp, err := c.cfg.Client.Do(req)
	if err != nil {
		// Sent or not, the same idempotency key makes a retry safe.
		return 0, ctx.Err() == nil, fmt.Errorf("calling %s %s: %w", call.Method, call.Path, err)
	}
	defer resp.Body.Close()
	limit := c.cfg.MaxAnswer
	if limit <= 0 {
		limit = DefaultMaxAnswer
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return 0, ctx.Err() == nil, fmt.Errorf("reading answer of %s %s: %w", call.Method, call.Path, err)
	}
	if int64(len(b)) > limit {
		return 0, false, fmt.Errorf("reading answer of %s %s: longer than %d bytes (raise the payload limit, trellis.Config.MaxPayloadBytes)", call.Method, call.Path, limit)
	}
	if resp.StatusCode >= 300 {
		p := problemOf(resp, b)
		return resp.StatusCode, p.Status == http.StatusServiceUnavailable, p
	}
	if call.Out != nil && len(b) > 0 {
		if err := json.Unmarshal(b, call.Out); err != nil {
			return 0, false, fmt.Errorf("decoding answer of %s %s: %w", call.Method, call.Path, err)
		}
	}
	return resp.StatusCode, false, nil
}

func (c *Client) request(ctx context.Context, call Call, body []byte, key string) (*http.Request, error) {
	u := *c.base
	u.Path = c.base.Path + call.Path
	u.RawQuery = call.Query.Encode()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, call.Method, u.String(), rd)
	if err != nil {
		return nil, fmt.Errorf("building request: %w", err)
	}
	req.Header.Set("Accept", "application/json")
	if body != nil || call.Method != http.MethodGet {
		// Also on a POST without a body: an --insecure server refuses a
		// state-changing request without it, which a web page could send.
		req.Header.Set("Content-Type", "application/json")
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	if c.cfg.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.cfg.Token)
	}
	// The trace of the caller goes on at the server (W3C traceparent).
	propagation.TraceContext{}.Inject(ctx, propagation.HeaderCarrier(req.Header))
	return req, nil
}

// problemOf decodes an error answer; one that is not problem+json (a proxy's
// page) becomes a problem with its status and no code.
func problemOf(resp *http.Response, b []byte) *Problem {
	p := &Problem{}
	if err := json.Unmarshal(b, p); err != nil || p.Status == 0 {
		text := strings.TrimSpace(string(b))
		if len(text) > 200 {
			text = text[:200]
		}
		p = &Problem{Title: resp.Status, Detail: fmt.Sprintf("HTTP %s: %s", resp.Status, text)}
	}
	p.Status = resp.StatusCode
	return p
}

// IsProblem returns err's problem, if it is one.
func IsProblem(err error) (*Problem, bool) {
	var p *Problem
	ok := errors.As(err, &p)
	return p, ok
}

// Open makes one GET request for a response read as it comes (a stream), with
// the extra headers given, and no timeout but ctx's. An answer of 300 or more is
// returned as a *Problem; the caller closes the body of a 2xx answer.
func (c *Client) Open(ctx context.Context, call Call, header http.Header) (*http.Response, error) {
	req, err := c.request(ctx, call, nil, "")
	if err != nil {
		return nil, err
	}
	for k, vs := range header {
		req.Header[k] = vs
	}
	resp, err := c.cfg.Client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("calling %s %s: %w", call.Method, call.Path, err)
	}
	if resp.StatusCode >= 300 {
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return nil, problemOf(resp, b)
	}
	return resp, nil
}
