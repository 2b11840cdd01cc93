package jsonenc

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"testing"
)

// Each function's bytes equal json.Marshal's, for the values it takes, and it
// declines what it would encode otherwise.
func TestSameAsEncodingJSON(t *testing.T) {
	strs := []string{"", "s0", "step one", "a\"b", `back\slash`, "<b>&", "tab\there", "nl\n", "\x00\x01\x1f", "é", "日本",
		"\u2028\u2029", "bad \xff utf-8", "\x7f", "emoji 🎉", "ok-name_1.2/3"}
	r := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		b := make([]byte, r.IntN(12))
		for i := range b {
			b[i] = byte(r.IntN(256))
		}
		strs = append(strs, string(b))
	}
	for _, s := range strs {
		want, _ := json.Marshal(s)
		if got := AppendString([]byte("x"), s); string(got) != "x"+string(want) {
			t.Fatalf("AppendString(%q) = %s, want x%s", s, got, want)
		}
	}

	floats := []float64{0, 0.001, 0.5, 1, 12.345, 1000.001, 123456789.125, 1e20, 1e-6, 9.99e20, -3.25}
	for range 2000 {
		floats = append(floats, float64(r.Int64N(1e12))/1000)
	}
	for _, f := range floats {
		want, _ := json.Marshal(f)
		got, ok := AppendFloat(nil, f)
		if !ok || string(got) != string(want) {
			t.Fatalf("AppendFloat(%v) = %s, %v; want %s", f, got, ok, want)
		}
	}
	for _, f := range []float64{1e21, 1e-7, -1e22, math.NaN(), math.Inf(1)} {
		if _, ok := AppendFloat(nil, f); ok {
			t.Fatalf("AppendFloat(%v) took a value json.Marshal encodes otherwise (or not at all)", f)
		}
	}

	raws := []string{`"done"`, `{"a": 1, "b": [1, 2, 3]}`, ` [ "x" ,null ] `, `"<script>&"`, `{"k":"\u2028 line sep"}`,
		"\"\u2028\"", `123`, `true`, `{"nested":{"deep":[{"x":"y"}]}}`, "\"bad \xff\""}
	for _, raw := range raws {
		want, err := json.Marshal(json.RawMessage(raw))
		if err != nil {
			t.Fatal(err)
		}
		got, ok := AppendRaw(nil, []byte(raw))
		if !ok || string(got) != string(want) {
			t.Fatalf("AppendRaw(%q) = %s, %v; want %s", raw, got, ok, want)
		}
	}
	for _, bad := range []string{``, `{`, `nope`, `"unterminated`, `1 2`} {
		if _, ok := AppendRaw(nil, []byte(bad)); ok {
			t.Fatalf("AppendRaw(%q) took invalid JSON", bad)
		}
	}
}
