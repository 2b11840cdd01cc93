// Package jsonenc appends the few JSON values the engine writes on every run
// (the lifecycle events of its stream) without encoding/json's reflection,
// producing the same bytes as json.Marshal does.
//
// The lifecycle events were a json.Marshal of a small struct each, five per
// run of three steps: 5% of embedded w1's CPU, 9% of a remote worker's
// process under w1 through a server (docs/benchmarks.md). Anything these
// functions do not know to encode the same way is left to encoding/json.
package jsonenc

import (
	"bytes"
	"encoding/json"
	"strconv"
)

// AppendString appends s as json.Marshal encodes a string.
func AppendString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s) // escapes, HTML's characters, other than ASCII
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// AppendInt appends n.
func AppendInt(b []byte, n int) []byte { return strconv.AppendInt(b, int64(n), 10) }

// AppendFloat appends f as json.Marshal encodes a float64; ok is false for a
// value it encodes otherwise (exponent forms, NaN, infinities).
func AppendFloat(b []byte, f float64) (_ []byte, ok bool) {
	abs := f
	if abs < 0 {
		abs = -abs
	}
	if abs != 0 && (abs < 1e-6 || abs >= 1e21) || f != f {
		return b, false
	}
	return strconv.AppendFloat(b, f, 'f', -1, 64), true
}

// AppendRaw appends the JSON value raw as json.Marshal encodes a
// json.RawMessage: compacted, with HTML's characters escaped in strings. ok
// is false when raw is not valid JSON.
func AppendRaw(b []byte, raw []byte) (_ []byte, ok bool) {
	var c bytes.Buffer
	if err := json.Compact(&c, raw); err != nil {
		return b, false
	}
	if bytes.ContainsAny(c.Bytes(), "<>&\u2028\u2029") {
		var h bytes.Buffer
		json.HTMLEscape(&h, c.Bytes())
		return append(b, h.Bytes()...), true
	}
	return append(b, c.Bytes()...), true
}
