package trellis

import (
	"encoding/json"
	"reflect"
	"testing"
)

// decodePlainCases are inputs on both sides of decodePlain's fast path.
var decodePlainCases = []string{
	`"ok"`, `""`, `"héllo wörld"`, `"a\"b"`, `"a\\b"`, `"\u00e9"`, "\"tab\there\"", `"ab`, `"`, `null`,
	` "ok"`, `"ok" `, "\"\xff\"", `0`, `-0`, `7`, `-42`, `007`, `1e3`, `1.5`, `+1`, `-`,
	`999999999999999999`, `9223372036854775807`, `9223372036854775808`, `-9223372036854775808`,
	`12 `, `true`, `[]`, `{}`, ``,
}

// FuzzDecodePlain checks that JSONCodec.Unmarshal decodes into *string, *int
// and *int64 exactly as encoding/json does, error or not, on and off the fast
// path.
func FuzzDecodePlain(f *testing.F) {
	for _, c := range decodePlainCases {
		f.Add([]byte(c))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, mk := range []func() any{
			func() any { s := "before"; return &s },
			func() any { n := 5; return &n },
			func() any { n := int64(5); return &n },
		} {
			got, want := mk(), mk()
			gotErr := JSONCodec{}.Unmarshal(data, got)
			wantErr := json.Unmarshal(data, want)
			if (gotErr == nil) != (wantErr == nil) {
				t.Fatalf("%q into %T: error %v, encoding/json's %v", data, got, gotErr, wantErr)
			}
			if wantErr == nil && !reflect.DeepEqual(got, want) {
				t.Fatalf("%q into %T: %v, encoding/json's %v", data, got, reflect.ValueOf(got).Elem(), reflect.ValueOf(want).Elem())
			}
		}
	})
}

// TestDecodePlainTakesTheCommonResults pins that the fast path is taken for a
// step's usual string and integer results, and left for the rest.
func TestDecodePlainTakesTheCommonResults(t *testing.T) {
	var s string
	var n int
	var n64 int64
	for _, c := range []struct {
		data string
		v    any
		want bool
	}{
		{`"ok"`, &s, true}, {`"héllo"`, &s, true}, {`"a\nb"`, &s, false}, {`null`, &s, false},
		{`42`, &n, true}, {`-7`, &n64, true}, {`1e3`, &n, false}, {`1.0`, &n, false},
		{`"ok"`, &[]byte{}, false}, {`true`, new(bool), false},
	} {
		if got := decodePlain([]byte(c.data), c.v); got != c.want {
			t.Errorf("decodePlain(%s, %T) = %v, want %v", c.data, c.v, got, c.want)
		}
	}
	if s != "héllo" || n != 42 || n64 != -7 {
		t.Errorf("decoded %q, %d, %d", s, n, n64)
	}
}
