// Package jsonvalid checks that bytes are one JSON value that every strict
// client reads as the sender meant: valid JSON (RFC 8259) in valid UTF-8, with
// escapes that name Unicode code points and no name twice in one object, at any
// depth (the I-JSON profile, RFC 7493).
//
// Go's encoding/json accepts invalid UTF-8 inside strings (it decodes it as
// U+FFFD, and json.Compact and json.RawMessage keep the raw bytes), lone
// surrogate escapes such as "\ud800", and duplicate names (the last one wins):
// a payload stored that way is sent back raw, and strict parsers (a browser's
// JSON.parse of a list holding it, Python's json with surrogates, a JSON
// schema validator) refuse it or read another value than the server did. The
// server refuses such input instead, with Check.
//
// The checking is go-json-experiment's jsontext (the upstream of Go's
// encoding/json/v2) with its default options, which validate by RFC 7493.
package jsonvalid

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/go-json-experiment/json/jsontext"
)

// Error is why bytes are not one valid JSON value, and where.
type Error struct {
	// Offset is the byte offset at which the problem was found (0 when it
	// concerns a name: Pointer says which).
	Offset int64
	// Pointer is the JSON Pointer (RFC 6901) of the value within which the
	// problem lies ("" for the top level); for a duplicate name, the pointer
	// of that name in its object.
	Pointer string
	// Reason says what is wrong: "duplicate object member name", "invalid
	// UTF-8 within string", "invalid surrogate pair ...", "invalid character
	// ...", ...
	Reason string
	// Duplicate: a name occurs twice in one object.
	Duplicate bool
	// InvalidUTF8: the bytes of a string are not UTF-8. (An escape that names
	// no Unicode code point, a lone surrogate "\ud800", is an invalid escape
	// sequence or surrogate pair.)
	InvalidUTF8 bool
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.Reason)
	if e.Duplicate {
		ptr := jsontext.Pointer(e.Pointer)
		fmt.Fprintf(&b, " %q in the object at %q", ptr.LastToken(), ptr.Parent())
		return b.String()
	}
	if e.Pointer != "" {
		fmt.Fprintf(&b, " at %q", e.Pointer)
	}
	if e.Offset > 0 {
		fmt.Fprintf(&b, " (byte %d)", e.Offset)
	}
	return b.String()
}

// Check returns nil when b is exactly one JSON value (surrounded by white space
// at most) that is valid UTF-8, whose escapes name Unicode code points, and
// whose objects hold each name once at every depth; else an *Error saying where
// and what. It never changes b.
func Check(b []byte) error {
	if jsontext.Value(b).IsValid() { // the fast path: no allocation
		return nil
	}
	return explain(b)
}

// explain finds why b is not valid, with the decoder that reports errors (the
// fast path only says whether).
func explain(b []byte) error {
	dec := jsontext.NewDecoder(bytes.NewReader(b))
	if err := dec.SkipValue(); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return &Error{Offset: dec.InputOffset(), Reason: "unexpected end of JSON input"}
		}
		return toError(err)
	}
	end := dec.InputOffset()
	if _, err := dec.ReadToken(); !errors.Is(err, io.EOF) {
		return &Error{Offset: end, Reason: "data after the top-level value"}
	}
	// Not reached while IsValid and the decoder agree; never accept what
	// IsValid refused.
	return &Error{Reason: "invalid JSON"}
}

// toError turns a jsontext error into an *Error.
func toError(err error) *Error {
	var se *jsontext.SyntacticError
	if !errors.As(err, &se) {
		return &Error{Reason: strings.TrimPrefix(err.Error(), "jsontext: ")}
	}
	e := &Error{Offset: se.ByteOffset, Pointer: string(se.JSONPointer), Reason: "invalid JSON"}
	if se.Err != nil {
		e.Reason = strings.TrimPrefix(se.Err.Error(), "jsontext: ")
	}
	switch {
	case errors.Is(se.Err, jsontext.ErrDuplicateName):
		e.Duplicate, e.Offset = true, 0
	case strings.Contains(e.Reason, "invalid UTF-8"):
		e.InvalidUTF8 = true
	}
	return e
}
