package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	servercore "github.com/trellis-dev/trellis/internal/core"

	"github.com/trellis-dev/trellis"
	"github.com/trellis-dev/trellis/internal/idemkey"
	"github.com/trellis-dev/trellis/store"
)

// Idempotency keys (docs/http-api.md#idempotency-keys): a request with an
// Idempotency-Key header on a route that takes one (route.takesKey: every
// mutating route but the token routes, route.unkeyed) is fingerprinted (method,
// path, body, principal) and looked up in the namespace first (except on routes
// whose store call looks it up first thing: route.keyInStore). A recorded key
// with the same fingerprint gets its first response again (status and body,
// with IdempotentReplayedHeader); with another fingerprint, 422. Otherwise the
// handler runs with the key in its context (internal/idemkey): the SDK method
// hands it to the store call it makes, which records the key and the rendered
// response in the transaction of its change. A handler that calls the store
// itself, or passes the SDK a store record type (namespaces, queues), puts
// call.idempotency() in the store call's parameters instead. When a concurrent
// duplicate committed first, the call changes nothing and fails with
// store.ErrIdempotencyKeyUsed, and the winner's response is replayed.
//
// The key is kept in the namespace the path names, but for POST /v1/namespaces,
// whose path names none: its key is kept in the namespace it creates (the
// body's name, set by createNamespace in keyed.ns). Keys are per namespace, so
// that is the namespace the request addresses: a retry (the same body) finds
// the key there, and the same key creating another namespace is another
// namespace's key, as a start in another namespace is.
//
// A retried DELETE of a run finds the run gone before its handler runs: see
// replayGone.

// Header names.
const (
	IdempotencyKeyHeader     = "Idempotency-Key"
	IdempotentReplayedHeader = "Idempotent-Replayed"
)

// errKeyRequired refuses a request without a key on a route that takes one,
// under Config.RequireIdempotencyKey.
var errKeyRequired = fmt.Errorf("%w: this server requires an %s header on every mutating request: a unique key per change, the same on each retry of it",
	ErrInvalidArgument, IdempotencyKeyHeader)

// keyed is the idempotency state of a request with a key.
type keyed struct {
	// rec is the key and fingerprint; its Response renders the route's answer
	// (render).
	rec *store.IdempotencyRecord
	// ns is the namespace the key is kept in (see the comment at the top).
	ns string
	// status and body are the response the store recorded with the key, rendered
	// by the last call of render (the store may render again when it retries its
	// transaction; the last rendering is the committed one).
	status   int
	body     []byte
	rendered bool
}

// render renders the response of a route answering status from the SDK value v,
// exactly as writeJSON would write it, and keeps it.
func (k *keyed) render(status int) func(v any) (int, []byte, error) {
	return func(v any) (int, []byte, error) {
		status, body, err := idemkey.RenderJSON(status, v)
		if err != nil {
			return 0, nil, err
		}
		k.status, k.body, k.rendered = status, body, true
		return status, body, nil
	}
}

// handle runs rt's handler, under the request's idempotency key when the route
// takes one and the request has one.
func (s *Server) handle(w http.ResponseWriter, r *http.Request, rt route, c *call) error {
	if !rt.takesKey() {
		return rt.handle(s, w, r, c)
	}
	if r.Header.Values(IdempotencyKeyHeader) == nil {
		if s.cfg.RequireIdempotencyKey {
			return errKeyRequired
		}
		return rt.handle(s, w, r, c)
	}
	rec, err := s.idempotencyRecord(w, r, c)
	if err != nil {
		return err
	}
	if !rt.keyInStore {
		if replayed, err := s.replay(w, r.Context(), c.ns, rec); replayed || err != nil {
			return err
		}
	}
	c.keyed = &keyed{rec: rec, ns: c.ns}
	rec.Response = c.keyed.render(rt.status)
	// A handler that makes the store call itself passes a store record its
	// route answers as it is (see call.idempotency).
	rec.Renderer, rec.Status = idemkey.SameRecordRenderer, rt.status
	// The request's client writes the key with its change.
	c.client = s.core.Client(c.ns, servercore.Calls{Handoff: s.handoffs,
		Idempotency: &idemkey.Request{Key: rec.Key, Fingerprint: rec.Fingerprint, Render: rec.Response, Status: rt.status}}).(*trellis.Client)
	err = rt.handle(s, w, r, c)
	if errors.Is(err, store.ErrIdempotencyKeyUsed) {
		// A concurrent duplicate executed and committed first: answer its response.
		replayed, rerr := s.replay(w, r.Context(), c.keyed.ns, rec)
		if rerr == nil && !replayed {
			rerr = fmt.Errorf("%w: idempotency key %q was used but its entry is gone", ErrUnavailable, rec.Key)
		}
		return rerr
	}
	if err != nil && rt.keyInStore {
		// Refused before the store saw the key (a limit changed since the first
		// request, say): a retry still gets the first response.
		if replayed, rerr := s.replay(w, r.Context(), c.keyed.ns, rec); replayed || rerr != nil {
			return rerr
		}
	}
	return err
}

// idempotency is the record a handler that makes the store call itself puts in
// its parameters: the request's key, whose response is the store's result
// rendered as the route's answer (so the result must be the answer's value:
// *store.Namespace, *store.Queue); nil without a key.
func (c *call) idempotency() *store.IdempotencyRecord {
	if c.keyed == nil {
		return nil
	}
	return c.keyed.rec
}

// replayGone is what wrap answers a request prepare refused with refused. A
// request with a key on a route that takes one, refused because its run is
// gone, is served its key as handle would: the response recorded under it when
// the same request recorded it (a retried DELETE of a run whose first try
// deleted it, the one keyed change that removes the run its route reads,
// answers that first 204), 422 when another request did. Without a recorded
// key (or with a malformed one) the refusal stands. Nothing leaks: prepare
// checked the route's role in the namespace before it read the run (c.client
// is set after that check), as it does before any keyed handler, and the
// fingerprint holds the principal, so only the principal whose request
// recorded the key gets its answer.
func (s *Server) replayGone(w http.ResponseWriter, r *http.Request, rt route, c *call, refused error) error {
	if !errors.Is(refused, store.ErrRunNotFound) || c.client == nil || !rt.takesKey() ||
		r.Header.Values(IdempotencyKeyHeader) == nil {
		return refused
	}
	rec, err := s.idempotencyRecord(w, r, c)
	if err != nil {
		return refused
	}
	if replayed, err := s.replay(w, r.Context(), c.ns, rec); replayed || err != nil {
		return err
	}
	return refused
}

// idempotencyRecord checks the request's key, reads its body (leaving it to be
// decoded again) and fingerprints the request.
func (s *Server) idempotencyRecord(w http.ResponseWriter, r *http.Request, c *call) (*store.IdempotencyRecord, error) {
	key, err := idempotencyKey(r.Header)
	if err != nil {
		return nil, err
	}
	if err := checkLength(r, s.cfg.MaxBodyBytes); err != nil {
		return nil, err
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes))
	if err != nil {
		if berr := bodyReadError(err, s.cfg.MaxBodyBytes); berr != nil {
			return nil, berr
		}
		return nil, fmt.Errorf("%w: reading body: %v", ErrInvalidArgument, err)
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	fp := store.IdempotencyFingerprint(r.Method, r.URL.EscapedPath(), body, c.principal.Name)
	return &store.IdempotencyRecord{Key: key, Fingerprint: fp}, nil
}

// idempotencyKey returns the Idempotency-Key header: given once, 1 to
// store.MaxIdempotencyKeyLen printable ASCII characters.
func idempotencyKey(h http.Header) (string, error) {
	vs := h.Values(IdempotencyKeyHeader)
	if len(vs) != 1 {
		return "", fmt.Errorf("%w: %s given %d times", ErrInvalidArgument, IdempotencyKeyHeader, len(vs))
	}
	key := vs[0]
	switch {
	case key == "":
		return "", fmt.Errorf("%w: empty %s", ErrInvalidArgument, IdempotencyKeyHeader)
	case len(key) > store.MaxIdempotencyKeyLen:
		return "", fmt.Errorf("%w: %s longer than %d bytes", ErrInvalidArgument, IdempotencyKeyHeader, store.MaxIdempotencyKeyLen)
	}
	for i := range len(key) {
		if key[i] < 0x20 || key[i] > 0x7e {
			return "", fmt.Errorf("%w: %s holds a character that is not printable ASCII", ErrInvalidArgument, IdempotencyKeyHeader)
		}
	}
	return key, nil
}

// replay answers the response recorded under rec's key in namespace ns, and
// reports whether there was one; a key recorded by another request is a
// conflict. No namespace (ns "") has no keys.
func (s *Server) replay(w http.ResponseWriter, ctx context.Context, ns string, rec *store.IdempotencyRecord) (bool, error) {
	if ns == "" {
		return false, nil
	}
	e, err := store.IdempotencyReplay(ctx, s.store, ns, rec)
	if err != nil || e == nil {
		return false, err
	}
	w.Header().Set(IdempotentReplayedHeader, "true")
	writeRaw(w, e.Status, e.Body)
	return true, nil
}

// writeRaw answers a rendered JSON body (none for 204) with status.
func writeRaw(w http.ResponseWriter, status int, body []byte) {
	if status != http.StatusNoContent {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Content-Type-Options", "nosniff")
	}
	w.WriteHeader(status)
	w.Write(body)
}

// reply answers a mutating handler's success: the response the store recorded
// with the request's key when it has one (so a first answer and its replays are
// the same bytes), else v as JSON (or no body for 204).
func reply(w http.ResponseWriter, c *call, status int, v any) {
	switch {
	case c.keyed != nil && c.keyed.rendered:
		writeRaw(w, c.keyed.status, c.keyed.body)
	case status == http.StatusNoContent:
		w.WriteHeader(status)
	default:
		writeJSON(w, status, v)
	}
}

// idempotencyPurgeBatch bounds the keys one purge transaction deletes.
const idempotencyPurgeBatch = 1000

// purgeLoop deletes expired idempotency keys (and the records of signed-out
// sessions past their expiry) every interval until Shutdown (s.draining), then
// closes s.purgeDone. Every server on a store may purge: the
// batches of two servers delete different rows or nothing.
func (s *Server) purgeLoop(every time.Duration) {
	defer close(s.purgeDone)
	tick := s.cfg.Clock.NewTimer(every)
	defer tick.Stop()
	for {
		select {
		case <-s.draining.Done():
			return
		case <-tick.C():
		}
		tick.Reset(every)
		n, err := s.purgeExpired(s.draining)
		if err != nil && s.draining.Err() == nil {
			s.cfg.Logger.Warn("purging expired idempotency keys", "err", err)
		}
		if _, err := s.purgeEndedSessions(s.draining); err != nil && s.draining.Err() == nil {
			s.cfg.Logger.Warn("purging the records of signed-out sessions", "err", err)
		}
		if s.cfg.purged != nil {
			s.cfg.purged(n, err)
		}
	}
}

// purgeExpired deletes expired keys in batches until a batch finds fewer than
// it may delete, and returns how many it deleted.
func (s *Server) purgeExpired(ctx context.Context) (int, error) {
	total := 0
	for {
		n, err := s.store.IdempotencyPurge(ctx, &store.IdempotencyPurgeParams{Limit: idempotencyPurgeBatch})
		total += n
		if err != nil || n < idempotencyPurgeBatch {
			return total, err
		}
	}
}
