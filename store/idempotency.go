package store

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"
)

// IdempotencyStore keeps the idempotency keys of mutating API calls (see DESIGN:
// Idempotency): per namespace, for IdempotencyTTL, each with the fingerprint of the
// request that used it and the response it got.
//
// A key is recorded by the mutating call it guards, in the same transaction as the
// change: the calls whose parameters carry an Idempotency field (RunCreate,
// RunsCreate, EventSend, RunCancel, RunResume, RunDelete, ApprovalDecide, the
// schedule calls, NamespaceCreate, NamespaceUpdate, QueueCreate, QueueUpdate,
// QueueSetPaused) write their IdempotencyRecord atomically with what they do, or
// nothing. A server serves a request with key K as follows:
//
//  1. IdempotencyGet(K) (or IdempotencyReplay): found with the same fingerprint →
//     replay its response; with another fingerprint → refuse (conflict).
//  2. Not found: make the call with the record. When a request with K executed in
//     between (a concurrent duplicate), the call changes nothing and fails with
//     ErrIdempotencyKeyUsed (same fingerprint: go back to 1 and replay the winner's
//     response, which is committed by then) or ErrIdempotencyKeyConflict (another
//     fingerprint). Of concurrent duplicates exactly one executes.
//
// A call that fails records nothing: a retry with the same key executes again.
type IdempotencyStore interface {
	// IdempotencyGet returns the entry of a key recorded less than IdempotencyTTL
	// ago. ErrIdempotencyKeyNotFound when there is none (or it expired).
	IdempotencyGet(ctx context.Context, p *IdempotencyGetParams) (*IdempotencyEntry, error)
	// IdempotencyPurge deletes up to Limit entries older than IdempotencyTTL and
	// returns how many it deleted; a server calls it in the background until it
	// returns fewer than Limit.
	IdempotencyPurge(ctx context.Context, p *IdempotencyPurgeParams) (int, error)
}

// IdempotencyTTL is how long a key is kept: a retry after that executes again.
const IdempotencyTTL = 24 * time.Hour

// MaxIdempotencyKeyLen caps a key's length.
const MaxIdempotencyKeyLen = 255

// IdempotencyRecord asks a mutating call to record its idempotency key (in the
// call's namespace) in the same transaction as its change.
type IdempotencyRecord struct {
	Key string
	// Fingerprint identifies the request (IdempotencyFingerprint).
	Fingerprint []byte
	// Response renders the response to keep under the key from the call's result
	// (*RunCreateResult, *EventSendResult, *Run of RunCancel and RunResume,
	// *Approval, *Namespace, *Queue; each call's field says which). The store
	// calls it inside the transaction, after the change,
	// possibly more than once when the transaction is retried: it must be quick and
	// have no other effect. Nil keeps status 0 and the result as JSON.
	Response func(result any) (status int, body []byte, err error)
	// Renderer and Status are Response as data, for a store that runs the
	// call in another process (store/storejs forwards a follower's writes to
	// the server that writes its log, and a func cannot travel): Renderer names a
	// renderer registered with RegisterIdempotencyRenderer, which that process
	// calls with Status and the result instead. Set by the caller together
	// with Response, both meaning the same rendering; "": none (such a store
	// refuses a record whose Response it cannot rebuild).
	Renderer string
	Status   int
}

// IdempotencyRenderer renders the response kept under an idempotency key
// from the status of the route and the call's result (IdempotencyRecord).
type IdempotencyRenderer func(status int, result any) (int, []byte, error)

var idemRenderers sync.Map // name → IdempotencyRenderer

// RegisterIdempotencyRenderer makes render known by name to the stores that
// rebuild IdempotencyRecord.Response from its Renderer field. Packages register
// theirs from init functions; a name registered twice panics.
func RegisterIdempotencyRenderer(name string, render IdempotencyRenderer) {
	if name == "" || render == nil {
		panic("store.RegisterIdempotencyRenderer: empty name or nil renderer")
	}
	if _, dup := idemRenderers.LoadOrStore(name, render); dup {
		panic("store.RegisterIdempotencyRenderer: " + name + " registered twice")
	}
}

// RebuildResponse sets r.Response from r.Renderer and r.Status (a record that
// arrived from another process); an unknown renderer is an error wrapping
// ErrInvalidParams.
func (r *IdempotencyRecord) RebuildResponse() error {
	if r == nil || r.Renderer == "" {
		return nil
	}
	f, ok := idemRenderers.Load(r.Renderer)
	if !ok {
		return fmt.Errorf("%w: Idempotency.Renderer: no renderer %q in this build", ErrInvalidParams, r.Renderer)
	}
	render, status := f.(IdempotencyRenderer), r.Status
	r.Response = func(result any) (int, []byte, error) { return render(status, result) }
	return nil
}

// Validate reports a malformed record (nil is valid: no key), wrapping
// ErrInvalidParams.
func (r *IdempotencyRecord) Validate() error {
	switch {
	case r == nil:
		return nil
	case r.Key == "":
		return fmt.Errorf("%w: Idempotency.Key is required", ErrInvalidParams)
	case len(r.Key) > MaxIdempotencyKeyLen:
		return fmt.Errorf("%w: Idempotency.Key is longer than %d bytes", ErrInvalidParams, MaxIdempotencyKeyLen)
	case len(r.Fingerprint) == 0 || len(r.Fingerprint) > 64:
		return fmt.Errorf("%w: Idempotency.Fingerprint must be 1 to 64 bytes", ErrInvalidParams)
	}
	return nil
}

// Render returns the status and body to keep for result.
func (r *IdempotencyRecord) Render(result any) (int, []byte, error) {
	if r.Response != nil {
		return r.Response(result)
	}
	b, err := json.Marshal(result)
	return 0, b, err
}

// IdempotencyFingerprint is the SHA-256 of a request's method, path, body and
// principal (each length-prefixed, so no two requests share one by shifting bytes
// between parts).
func IdempotencyFingerprint(method, path string, body []byte, principal string) []byte {
	h := sha256.New()
	var n [8]byte
	for _, part := range [][]byte{[]byte(method), []byte(path), body, []byte(principal)} {
		binary.BigEndian.PutUint64(n[:], uint64(len(part)))
		h.Write(n[:])
		h.Write(part)
	}
	return h.Sum(nil)
}

// IdempotencyEntry is a recorded key.
type IdempotencyEntry struct {
	Namespace   string    `json:"namespace"`
	Key         string    `json:"key"`
	Fingerprint []byte    `json:"fingerprint"`
	Status      int       `json:"status"`
	Body        []byte    `json:"body"`
	CreatedAt   time.Time `json:"created_at"`
}

// IdempotencyGetParams are the parameters of IdempotencyGet.
type IdempotencyGetParams struct {
	Namespace string `json:"namespace"`
	Key       string `json:"key"`
}

// IdempotencyPurgeParams are the parameters of IdempotencyPurge.
type IdempotencyPurgeParams struct {
	// Limit caps how many entries one call deletes; 0 means 1000.
	Limit int `json:"limit,omitempty"`
}

// IdempotencyReplay is step 1 of serving a request with a key (see
// IdempotencyStore): it returns the entry to replay when rec's key was recorded by
// the same request, an error wrapping ErrIdempotencyKeyConflict when by another,
// and nil, nil when the call should be made (with rec). A caller whose call then
// fails with ErrIdempotencyKeyUsed calls it again to get the winner's entry.
func IdempotencyReplay(ctx context.Context, s IdempotencyStore, namespace string, rec *IdempotencyRecord) (*IdempotencyEntry, error) {
	e, err := s.IdempotencyGet(ctx, &IdempotencyGetParams{Namespace: namespace, Key: rec.Key})
	switch {
	case errors.Is(err, ErrIdempotencyKeyNotFound):
		return nil, nil
	case err != nil:
		return nil, err
	case !bytes.Equal(e.Fingerprint, rec.Fingerprint):
		return nil, fmt.Errorf("%w: %q", ErrIdempotencyKeyConflict, rec.Key)
	}
	return e, nil
}
