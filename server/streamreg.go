package server

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/trellis-dev/trellis/internal/auth"
)

// Open streams (SSE run streams, the UI's, and the worker protocol's Claim and
// Subscribe streams) outlive the authentication of the request that opened
// them. The server keeps them in a registry, by principal and by credential:
// it caps each principal's open streams (Config.MaxStreamsPerPrincipal) and,
// every Config.StreamAuthInterval, authenticates each distinct credential of
// an open stream again through the Authenticator, ending the streams of those
// that no longer authenticate (a revoked or expired token, an ended UI
// session). With the Authenticator's cache (storeauth: 500 ms), a token
// revoked on any server of a store loses its streams on every other within
// the cache time and an interval. A credential the store cannot check now (it
// does not answer) keeps its streams.

// DefaultStreamAuthInterval is Config.StreamAuthInterval's default.
const DefaultStreamAuthInterval = 250 * time.Millisecond

// streamAuthTimeout bounds one check of a credential.
const streamAuthTimeout = 5 * time.Second

// streamRegistry is the server's open streams.
type streamRegistry struct {
	mu    sync.Mutex
	count map[string]int                 // open streams by principal name
	creds map[[32]byte]*credential       // by credential key (credentialKey)
	all   map[*trackedStream]*credential // every open stream
}

// credential is what open streams authenticated with, and how to check it
// again.
type credential struct {
	key     [32]byte
	check   func(context.Context) error
	streams map[*trackedStream]struct{}
}

// trackedStream is one registered stream.
type trackedStream struct {
	principal string
	end       func() // ends the stream; called at most once, not under the lock
	ended     bool   // end was called (under the registry's lock)
}

// credentialKey identifies a credential: streams with the same key are checked
// once per pass. Its parts are the principal's name (streams authenticated
// otherwise than by a header, by a client certificate say, differ by it), the
// Authorization header and the UI session's ID.
func credentialKey(parts ...string) [32]byte {
	h := sha256.New()
	for _, p := range parts {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	var k [32]byte
	h.Sum(k[:0])
	return k
}

// trackStream registers a stream of principal p, authenticated by the
// credential key identifies and check re-checks. end ends the stream; the
// registry calls it once when the credential no longer authenticates. The
// returned function unregisters the stream (call it once, when the stream
// ends). A principal with MaxStreamsPerPrincipal streams open gets a
// *limitError. Under Insecure nothing is registered.
func (s *Server) trackStream(p *auth.Principal, key [32]byte, check func(context.Context) error, end func()) (func(), error) {
	if s.cfg.Insecure {
		return func() {}, nil
	}
	reg := &s.streamReg
	reg.mu.Lock()
	defer reg.mu.Unlock()
	if reg.count == nil {
		reg.count, reg.creds, reg.all = map[string]int{}, map[[32]byte]*credential{}, map[*trackedStream]*credential{}
	}
	if n := reg.count[p.Name]; s.cfg.MaxStreamsPerPrincipal > 0 && n >= s.cfg.MaxStreamsPerPrincipal {
		return nil, &limitError{msg: fmt.Sprintf("principal %q has %d streams open on this server (the most it may)", p.Name, n), after: time.Second}
	}
	st := &trackedStream{principal: p.Name, end: end}
	c := reg.creds[key]
	if c == nil {
		c = &credential{key: key, check: check, streams: map[*trackedStream]struct{}{}}
		reg.creds[key] = c
	}
	c.streams[st] = struct{}{}
	reg.all[st] = c
	reg.count[p.Name]++
	return func() { s.closeStream(st) }, nil
}

// closeStream unregisters a stream.
func (s *Server) closeStream(st *trackedStream) {
	reg := &s.streamReg
	reg.mu.Lock()
	defer reg.mu.Unlock()
	c, ok := reg.all[st]
	if !ok {
		return
	}
	delete(reg.all, st)
	delete(c.streams, st)
	if len(c.streams) == 0 {
		delete(reg.creds, c.key)
	}
	if reg.count[st.principal]--; reg.count[st.principal] <= 0 {
		delete(reg.count, st.principal)
	}
}

// streamsOf returns the number of streams principal name has open here.
func (s *Server) streamsOf(name string) int {
	s.streamReg.mu.Lock()
	defer s.streamReg.mu.Unlock()
	return s.streamReg.count[name]
}

// endStreamsOf ends every open stream of principal name at once (its token
// was revoked through this server).
func (s *Server) endStreamsOf(name string) {
	reg := &s.streamReg
	reg.mu.Lock()
	var ends []func()
	for st := range reg.all {
		if st.principal == name && !st.ended {
			st.ended = true
			ends = append(ends, st.end)
		}
	}
	reg.mu.Unlock()
	for _, end := range ends {
		end()
	}
}

// authLoop checks the credentials of the open streams every
// StreamAuthInterval until the server drains.
func (s *Server) authLoop() {
	defer close(s.authLoopDone)
	t := s.cfg.Clock.NewTimer(s.cfg.StreamAuthInterval)
	defer t.Stop()
	for {
		select {
		case <-s.draining.Done():
			return
		case <-t.C():
		}
		s.recheckStreams(s.draining)
		t.Reset(s.cfg.StreamAuthInterval)
	}
}

// recheckStreams authenticates each credential of an open stream once and
// ends the streams of those that are refused.
func (s *Server) recheckStreams(ctx context.Context) {
	reg := &s.streamReg
	reg.mu.Lock()
	creds := make([]*credential, 0, len(reg.creds))
	for _, c := range reg.creds {
		creds = append(creds, c)
	}
	reg.mu.Unlock()
	for _, c := range creds {
		cctx, cancel := context.WithTimeout(ctx, streamAuthTimeout)
		err := c.check(cctx)
		cancel()
		if errors.Is(err, auth.ErrUnauthenticated) {
			s.endCredential(c)
		}
	}
}

// endCredential ends the streams of a credential that no longer authenticates.
func (s *Server) endCredential(c *credential) {
	reg := &s.streamReg
	reg.mu.Lock()
	var ends []func()
	for st := range c.streams {
		if !st.ended {
			st.ended = true
			ends = append(ends, st.end)
		}
	}
	reg.mu.Unlock()
	for _, end := range ends {
		end()
	}
}

// endCredentialKey ends the streams of the credential key identifies, if any
// is open (a UI session signed out on this server).
func (s *Server) endCredentialKey(key [32]byte) {
	s.streamReg.mu.Lock()
	c := s.streamReg.creds[key]
	s.streamReg.mu.Unlock()
	if c != nil {
		s.endCredential(c)
	}
}

// endSignal is a channel closed once, by whichever of its closers comes
// first.
type endSignal struct {
	once sync.Once
	ch   chan struct{}
}

func newEndSignal() *endSignal { return &endSignal{ch: make(chan struct{})} }

func (e *endSignal) end() { e.once.Do(func() { close(e.ch) }) }

// registerSSE registers the SSE stream of call c (a route with stream: true)
// under its principal and credential: the Authorization header, and the UI
// session when the UI's stream route forwarded it (uiStream). The stream ends
// when c.streamEnd closes; c.streamClose unregisters it.
func (s *Server) registerSSE(r *http.Request, c *call) error {
	if s.cfg.Insecure {
		return nil
	}
	header, vals := r.Header.Get("Authorization"), r.Context()
	sess, _ := vals.Value(uiSessionKey{}).(*session)
	var sessID string
	if sess != nil {
		sessID = string(sess.ID)
	}
	check := func(ctx context.Context) error {
		if _, err := s.authenticate(valuesOf{ctx, vals}, header); err != nil {
			return err
		}
		if sess != nil {
			return s.checkSession(ctx, sess)
		}
		return nil
	}
	end := newEndSignal()
	unregister, err := s.trackStream(c.principal, credentialKey(c.principal.Name, header, sessID), check, end.end)
	if err != nil {
		return err
	}
	c.streamEnd, c.streamClose = end.ch, unregister
	return nil
}

// valuesOf is a context with the deadline and cancellation of its Context and
// the values of vals: a stream's check authenticates with the values of the
// request that opened it (what authenticate may read there besides the
// header), long after that request's own context ended. The request's record
// for its access log line (requestInfo) is not among them: it is the request's
// to write, on its own goroutine, not the checks'.
type valuesOf struct {
	context.Context
	vals context.Context
}

func (v valuesOf) Value(key any) any {
	if _, ok := key.(requestInfoKey); ok {
		return nil
	}
	return v.vals.Value(key)
}
