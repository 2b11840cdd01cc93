// Package blobs keeps the large payloads of runs apart from their rows.
//
// A payload (a run's input or output, a step's result, an event's payload, a
// run-store value) longer than a store's threshold is written to a Backend
// under its run and its SHA-256, and the row holds a short reference in its
// place. Readers that need the payload resolve the reference; a listing does
// not load it. Small payloads stay in the row as before: no extra read or
// write. The reference starts with a NUL byte, which no JSON value (nor any
// payload Trellis writes) starts with, so a value is a reference or inline by
// its first bytes alone.
//
// The default backend is a table of the store itself (the SQL drivers make
// it); an S3-compatible object store registers itself under "s3" (package
// store/blobs/s3blobs) and is chosen by the store URL's blobs parameter. See
// docs/payloads.md.
package blobs

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"sync"

	"github.com/trellis-dev/trellis/store"
)

// DefaultThreshold is the size above which a payload is stored apart, unless
// the store URL's blob_threshold says otherwise.
const DefaultThreshold = 256 << 10

// MinThreshold is the smallest threshold a store accepts: a reference is
// about 100 bytes, so a smaller payload gains nothing from being apart.
const MinThreshold = 1 << 10

// ErrNotFound: a reference names a payload the backend does not hold (it was
// deleted with its run, or the backend lost it).
var ErrNotFound = errors.New("payload stored apart not found")

// Backend stores payloads by namespace, run ID and key (the payload's
// SHA-256, in hex). Put of a key that exists is a success (the content is the
// same). Implementations are safe for concurrent use.
type Backend interface {
	Put(ctx context.Context, namespace, runID, key string, data []byte) error
	// Get fails with ErrNotFound (wrapped) for an unknown key.
	Get(ctx context.Context, namespace, runID, key string) ([]byte, error)
	// DeleteRuns deletes every payload of the runs named.
	DeleteRuns(ctx context.Context, namespace string, runIDs []string) error
	Close() error
}

// Opener opens the backend a blobs URL names.
type Opener func(ctx context.Context, u *url.URL) (Backend, error)

var (
	regMu   sync.Mutex
	openers = map[string]Opener{}
)

// Register makes a backend available under a URL scheme (as database/sql
// drivers register): a program that imports the backend's package may name it.
func Register(scheme string, open Opener) {
	regMu.Lock()
	defer regMu.Unlock()
	openers[scheme] = open
}

// Open opens the backend of a blobs URL (s3://bucket/prefix?endpoint=...).
func Open(ctx context.Context, raw string) (Backend, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("blobs URL: %w", err)
	}
	regMu.Lock()
	open := openers[u.Scheme]
	regMu.Unlock()
	if open == nil {
		return nil, fmt.Errorf("blobs URL %q: no backend for scheme %q (an S3-compatible store is s3://bucket/prefix?endpoint=host:port, and the program must import github.com/trellis-dev/trellis/store/blobs/s3blobs)", Redact(raw), u.Scheme)
	}
	return open(ctx, u)
}

// Redact hides the secret of a blobs URL for messages and logs.
func Redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL)"
	}
	q := u.Query()
	if q.Has("secret_key") {
		q.Set("secret_key", "xxxxx")
		u.RawQuery = q.Encode()
	}
	if u.User != nil {
		if _, ok := u.User.Password(); ok {
			u.User = url.UserPassword(u.User.Username(), "xxxxx")
		}
	}
	return u.String()
}

// refMagic starts every reference: NUL, a name, NUL.
var refMagic = []byte(store.BlobRefPrefix)

// IsRef reports whether v is a reference to a payload stored apart.
func IsRef(v []byte) bool { return len(v) > len(refMagic) && bytes.HasPrefix(v, refMagic) }

// Ref is a decoded reference.
type Ref struct {
	Size  int
	Key   string
	RunID string
}

func encodeRef(size int, key, runID string) []byte {
	b := make([]byte, 0, len(refMagic)+len(key)+len(runID)+24)
	b = append(b, refMagic...)
	b = strconv.AppendInt(b, int64(size), 10)
	b = append(b, 0)
	b = append(b, key...)
	b = append(b, 0)
	return append(b, runID...)
}

// ParseRef decodes a reference; ok is false when v is none.
func ParseRef(v []byte) (r Ref, ok bool) {
	if !IsRef(v) {
		return Ref{}, false
	}
	parts := bytes.SplitN(v[len(refMagic):], []byte{0}, 3)
	if len(parts) != 3 {
		return Ref{}, false
	}
	n, err := strconv.Atoi(string(parts[0]))
	if err != nil || n < 0 || len(parts[1]) != 64 || len(parts[2]) == 0 {
		return Ref{}, false
	}
	return Ref{Size: n, Key: string(parts[1]), RunID: string(parts[2])}, true
}

// Payloads decides which payloads go apart and moves them there and back. A
// nil *Payloads keeps everything inline (every method is then a no-op).
type Payloads struct {
	b         Backend
	threshold int
}

// New returns the Payloads of a store: payloads longer than threshold go to b.
func New(b Backend, threshold int) *Payloads {
	if threshold <= 0 {
		threshold = DefaultThreshold
	}
	return &Payloads{b: b, threshold: threshold}
}

// Backend is where the payloads go.
func (p *Payloads) Backend() Backend { return p.b }

// Threshold is the size above which a payload goes apart.
func (p *Payloads) Threshold() int { return p.threshold }

// Big reports whether v goes apart: it is above the threshold, or it starts
// as a reference does (a payload of a codec other than JSON, say), which
// then reads back as itself.
func (p *Payloads) Big(v []byte) bool {
	return p != nil && (len(v) > p.threshold || len(v) > 0 && v[0] == 0 && IsRef(v))
}

// Put stores v apart as a payload of run (namespace, runID) and returns its
// reference. The payload is durable when Put returns.
func (p *Payloads) Put(ctx context.Context, namespace, runID string, v []byte) ([]byte, error) {
	sum := sha256.Sum256(v)
	key := hex.EncodeToString(sum[:])
	if err := p.b.Put(ctx, namespace, runID, key, v); err != nil {
		return nil, fmt.Errorf("storing a payload of %d bytes apart: %w", len(v), err)
	}
	return encodeRef(len(v), key, runID), nil
}

// put is Put of v when it is big, else v.
func (p *Payloads) put(ctx context.Context, namespace, runID string, v []byte) ([]byte, error) {
	if !p.Big(v) {
		return v, nil
	}
	return p.Put(ctx, namespace, runID, v)
}

// Resolve returns the payload v refers to, or v itself when it is inline.
func (p *Payloads) Resolve(ctx context.Context, namespace string, v []byte) ([]byte, error) {
	r, ok := ParseRef(v)
	if !ok {
		return v, nil
	}
	if p == nil {
		return nil, fmt.Errorf("%w: the store holds a payload stored apart (%d bytes) but has no blob backend", ErrNotFound, r.Size)
	}
	data, err := p.b.Get(ctx, namespace, r.RunID, r.Key)
	if err != nil {
		return nil, fmt.Errorf("reading a payload of %d bytes of run %s: %w", r.Size, r.RunID, err)
	}
	if len(data) != r.Size {
		return nil, fmt.Errorf("reading a payload of run %s: %d bytes where %d were stored", r.RunID, len(data), r.Size)
	}
	return data, nil
}

// Written maps the references a write just made to the payloads they stand
// for, so that what the write returns is given its payloads back without
// reading them.
type Written map[string][]byte

// resolve replaces *v by what it refers to.
func (p *Payloads) resolve(ctx context.Context, namespace string, v *[]byte) error {
	return p.resolveKnown(ctx, namespace, v, nil)
}

// resolveKnown is resolve, taking the payloads of known references from w.
func (p *Payloads) resolveKnown(ctx context.Context, namespace string, v *[]byte, w Written) error {
	if !IsRef(*v) {
		return nil
	}
	if orig, ok := w[string(*v)]; ok {
		*v = orig
		return nil
	}
	d, err := p.Resolve(ctx, namespace, *v)
	if err != nil {
		return err
	}
	*v = d
	return nil
}

// createBig reports whether anything of p goes apart.
func (p *Payloads) createBig(c *store.RunCreateParams) bool {
	if p.Big(c.Input) {
		return true
	}
	for _, op := range c.History {
		if p.Big(op.Result) {
			return true
		}
	}
	for _, kv := range c.KV {
		if p.Big(kv.Value) {
			return true
		}
	}
	return false
}

// cloneOps returns ops with the big results replaced by references (a copy
// of each changed op; ops itself is not changed).
func (p *Payloads) cloneOps(ctx context.Context, namespace, runID string, ops []*store.Op) ([]*store.Op, error) {
	var out []*store.Op
	for i, op := range ops {
		if !p.Big(op.Result) {
			continue
		}
		if out == nil {
			out = slices.Clone(ops)
		}
		c := *op
		var err error
		if c.Result, err = p.Put(ctx, namespace, runID, op.Result); err != nil {
			return nil, err
		}
		out[i] = &c
	}
	if out == nil {
		return ops, nil
	}
	return out, nil
}

func (p *Payloads) cloneKV(ctx context.Context, namespace, runID string, kvs []store.KVWrite) ([]store.KVWrite, error) {
	var out []store.KVWrite
	for i, kv := range kvs {
		if !p.Big(kv.Value) {
			continue
		}
		if out == nil {
			out = slices.Clone(kvs)
		}
		var err error
		if out[i].Value, err = p.Put(ctx, namespace, runID, kv.Value); err != nil {
			return nil, err
		}
	}
	if out == nil {
		return kvs, nil
	}
	return out, nil
}

type omitKey struct{}

// WithOmitLarge marks ctx for a caller that reads a run only for its record
// (a server authorizing a request on the run's queue): a run read under it
// (trellis.Client.Get) leaves the payloads stored apart out, unread
// (store.RunGetParams.OmitLarge).
func WithOmitLarge(ctx context.Context) context.Context {
	return context.WithValue(ctx, omitKey{}, true)
}

// OmitLarge reports whether ctx is marked by WithOmitLarge.
func OmitLarge(ctx context.Context) bool {
	v, _ := ctx.Value(omitKey{}).(bool)
	return v
}
