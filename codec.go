package trellis

import (
	"encoding/json"
	"unicode/utf8"
)

// Codec encodes workflow inputs and outputs, step results and run-store values.
// The default is JSON. A codec must be deterministic enough that a value it decodes
// and encodes again means the same thing.
type Codec interface {
	Marshal(v any) ([]byte, error)
	Unmarshal(data []byte, v any) error
}

// JSONCodec is the default codec, encoding/json.
type JSONCodec struct{}

// Marshal encodes v as JSON.
func (JSONCodec) Marshal(v any) ([]byte, error) { return json.Marshal(v) }

// Unmarshal decodes JSON data into v.
func (JSONCodec) Unmarshal(data []byte, v any) error {
	if decodePlain(data, v) {
		return nil
	}
	return json.Unmarshal(data, v)
}

// decodePlain decodes the commonest results, a string with no escape and an
// integer, into *string, *int and *int64 without encoding/json, and reports
// whether it did; it leaves everything else to encoding/json, whose result it
// gives in every case it takes (FuzzDecodePlain). Every step result is decoded
// (a first run returns what a replay would), on the workflow's goroutine:
// encoding/json's reflection is deep enough to make that goroutine grow its
// stack twice, copying it each time, and a burst of runs holds thousands of
// them.
func decodePlain(data []byte, v any) bool {
	switch p := v.(type) {
	case *string:
		if len(data) < 2 || data[0] != '"' || data[len(data)-1] != '"' {
			return false
		}
		s := data[1 : len(data)-1]
		for _, c := range s {
			if c < 0x20 || c == '"' || c == '\\' {
				return false
			}
		}
		if !utf8.Valid(s) {
			return false // encoding/json replaces invalid bytes
		}
		*p = string(s)
		return true
	case *int:
		n, ok := plainInt(data)
		if !ok || int64(int(n)) != n {
			return false // encoding/json's error for a 32-bit int
		}
		*p = int(n)
		return true
	case *int64:
		n, ok := plainInt(data)
		if ok {
			*p = n
		}
		return ok
	}
	return false
}

// plainInt parses a JSON integer of at most 18 digits, with no sign but a
// leading minus and no exponent, fraction, leading zero or space, as
// encoding/json would into an int64. Eighteen digits cannot overflow it.
func plainInt(data []byte) (int64, bool) {
	d, neg := data, len(data) > 0 && data[0] == '-'
	if neg {
		d = d[1:]
	}
	if len(d) == 0 || len(d) > 18 || (d[0] == '0' && len(d) > 1) {
		return 0, false
	}
	var n int64
	for _, c := range d {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	if neg {
		n = -n
	}
	return n, true
}
