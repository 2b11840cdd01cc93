package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/trellis-dev/trellis/internal/jsonvalid"
	"github.com/trellis-dev/trellis/store"
)

// decodeBody decodes r's JSON body into v: the content type must be
// application/json, the body at most max bytes (a declared Content-Length over it
// is refused before anything is read), with no unknown fields and nothing after
// the value. When optional, an empty body leaves v as it is.
func decodeBody(w http.ResponseWriter, r *http.Request, max int64, optional bool, v any) error {
	if err := checkLength(r, max); err != nil {
		return err
	}
	if optional && r.ContentLength == 0 && r.Header.Get("Content-Type") == "" {
		return nil
	}
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mt != "application/json" {
		return fmt.Errorf("%w: Content-Type must be application/json", ErrUnsupportedMediaType)
	}
	data, err := readBody(http.MaxBytesReader(w, r.Body, max), max, r.ContentLength)
	if err != nil {
		return err
	}
	return decodeBytes(data, optional, v)
}

// checkLength refuses a declared Content-Length over max before anything is
// read.
func checkLength(r *http.Request, max int64) error {
	if r.ContentLength > max {
		return fmt.Errorf("%w: body is %d bytes (limit %d)", ErrBodyTooLarge, r.ContentLength, max)
	}
	return nil
}

// bodyReadError is the answer to a read of a body limited to max bytes that
// failed for its size or its slowness (the connection's read deadline); nil
// for any other error, the caller's to name.
func bodyReadError(err error, max int64) error {
	if mbe := (*http.MaxBytesError)(nil); errors.As(err, &mbe) {
		return fmt.Errorf("%w: body over %d bytes", ErrBodyTooLarge, max)
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return errBodyTimeout
	}
	return nil
}

// decodeJSON decodes exactly one JSON value from body (limited to max bytes)
// into v, as decodeBytes does. A read that failed for the body's size or
// slowness is answered as bodyReadError says.
func decodeJSON(body io.Reader, max int64, optional bool, v any) error {
	data, err := readBody(body, max, -1)
	if err != nil {
		return err
	}
	return decodeBytes(data, optional, v)
}

// decodeBytes decodes data, one JSON value, into v strictly: data must pass
// jsonvalid.Check (valid UTF-8, no name twice in an object at any depth,
// nothing after the value), so a payload in it (a json.RawMessage field) does
// too, and v's type must know every field. When optional, empty data (or white
// space) leaves v as it is.
func decodeBytes(data []byte, optional bool, v any) error {
	if optional && len(bytes.TrimSpace(data)) == 0 {
		return nil
	}
	if err := jsonvalid.Check(data); err != nil {
		return fmt.Errorf("%w: malformed JSON body: %v", ErrInvalidArgument, err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%w: malformed JSON body: %v", ErrInvalidArgument, err)
	}
	return nil
}

// readBodyPrealloc caps the buffer readBody makes before the body arrives.
const readBodyPrealloc = 64 << 10

// readBody reads all of body (limited to limit bytes by the caller's reader)
// as io.ReadAll does, into a buffer of the size the request declared when it
// did (size > 0), so that a body is read without growing its buffer; up to
// readBodyPrealloc, so that a request that declares a large body and sends it
// slowly holds little more than it sent.
func readBody(body io.Reader, limit, size int64) ([]byte, error) {
	n := int64(512)
	if size > 0 && size <= limit {
		n = min(size+1, readBodyPrealloc) // the last read, which finds EOF, needs room
	}
	b := make([]byte, 0, n)
	for {
		n, err := body.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if errors.Is(err, io.EOF) {
			return b, nil
		}
		if err != nil {
			if berr := bodyReadError(err, limit); berr != nil {
				return nil, berr
			}
			return nil, fmt.Errorf("%w: reading the body: %v", ErrInvalidArgument, err)
		}
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)] // let append grow it
		}
	}
}

// errBodyTimeout is a body still unread when the connection's read deadline
// (Config.ReadTimeout, from the request's first byte) passed: the client sends
// too slowly, and what it sent so far says nothing of its JSON.
var errBodyTimeout = fmt.Errorf("%w: the request body was not received within the server's read timeout", ErrRequestTimeout)

// maxRefLen bounds IDs, keys and names taken from paths and bodies.
const maxRefLen = 255

// namespacePattern is what a namespace may be called: the store's one rule
// for names (store.ValidateNamespace; store.ValidateName for the names of
// queues, schedules, workflows and tokens, docs/http-api.md "Names").
var namespacePattern = store.NamespacePattern

// checkRef refuses an ID, key, event name or the name of an existing object
// in a path that is empty, too long, not UTF-8, or holds a control character,
// a slash or a backslash (it could not be addressed in a path). New names are
// checked by the stricter store.ValidateName: a path addressing an object
// named before that rule keeps reaching it.
func checkRef(what, s string) error {
	switch {
	case s == "":
		return fmt.Errorf("%w: empty %s", ErrInvalidArgument, what)
	case len(s) > maxRefLen:
		return fmt.Errorf("%w: %s longer than %d bytes", ErrInvalidArgument, what, maxRefLen)
	case !utf8.ValidString(s):
		return fmt.Errorf("%w: %s is not UTF-8", ErrInvalidArgument, what)
	case strings.ContainsAny(s, `/\`) || strings.IndexFunc(s, unicode.IsControl) >= 0:
		return fmt.Errorf("%w: %s %q holds a slash, backslash or control character", ErrInvalidArgument, what, s)
	}
	return nil
}

// query reads a route's query parameters: unknown or repeated ones are refused.
type query struct {
	v   url.Values
	err error
}

func parseQuery(r *http.Request, allowed []param) *query {
	v, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return &query{err: fmt.Errorf("%w: malformed query: %v", ErrInvalidArgument, err)}
	}
	for k, vs := range v {
		if !slices.ContainsFunc(allowed, func(p param) bool { return p.name == k }) {
			return &query{err: fmt.Errorf("%w: unknown query parameter %q", ErrInvalidArgument, k)}
		}
		if len(vs) > 1 {
			return &query{err: fmt.Errorf("%w: query parameter %q given %d times", ErrInvalidArgument, k, len(vs))}
		}
	}
	return &query{v: v}
}

func (q *query) fail(format string, a ...any) {
	if q.err == nil {
		q.err = fmt.Errorf("%w: "+format, append([]any{ErrInvalidArgument}, a...)...)
	}
}

func (q *query) str(name string) string {
	if q.v == nil {
		return ""
	}
	s := q.v.Get(name)
	if len(s) > 4096 {
		q.fail("%s too long", name)
	}
	return s
}

func (q *query) list(name string) []string {
	s := q.str(name)
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

func (q *query) time(name string) time.Time {
	s := q.str(name)
	if s == "" {
		return time.Time{}
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		q.fail("%s: want an RFC 3339 time, got %q", name, s)
	}
	return t.UTC()
}

func (q *query) limit(name string, max int) int {
	s := q.str(name)
	if s == "" {
		return 0
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > max {
		q.fail("%s: want an integer from 1 to %d, got %q", name, max, s)
		return 0
	}
	return n
}

func (q *query) duration(name string, max time.Duration) time.Duration {
	s := q.str(name)
	if s == "" {
		return 0
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 || d > max {
		q.fail("%s: want a duration such as \"30s\", at most %s, got %q", name, max, s)
		return 0
	}
	return d
}
