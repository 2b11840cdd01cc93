package blobs

import (
	"strings"
	"testing"
)

func TestRefs(t *testing.T) {
	key := strings.Repeat("ab", 32)
	r := encodeRef(12345, key, "run/1:x")
	got, ok := ParseRef(r)
	if !ok || got != (Ref{Size: 12345, Key: key, RunID: "run/1:x"}) {
		t.Fatalf("ParseRef(encodeRef) = %+v, %v", got, ok)
	}
	for _, bad := range []string{"", `"json"`, "\x00trellis-blob\x00", "\x00trellis-blob\x00x\x00" + key + "\x00r",
		"\x00trellis-blob\x0012\x00short\x00r", "\x00trellis-blob\x0012\x00" + key + "\x00", "\x00trellis-blob\x00-1\x00" + key + "\x00r"} {
		if _, ok := ParseRef([]byte(bad)); ok {
			t.Errorf("ParseRef(%q) accepted it", bad)
		}
	}
	p := New(nil, 0)
	if p.Threshold() != DefaultThreshold {
		t.Fatalf("default threshold %d", p.Threshold())
	}
	if p.Big([]byte(`"small"`)) || !p.Big(make([]byte, DefaultThreshold+1)) {
		t.Fatal("Big misjudged a size")
	}
	if !p.Big(append([]byte(refMagic), "1\x00x\x00r"...)) {
		t.Fatal("a small payload that starts as a reference does is not stored apart")
	}
	var none *Payloads
	if none.Big(make([]byte, 10<<20)) {
		t.Fatal("a nil Payloads stores something apart")
	}
	if v, err := none.Resolve(t.Context(), "ns", []byte(`"inline"`)); err != nil || string(v) != `"inline"` {
		t.Fatalf("Resolve of an inline value: %q, %v", v, err)
	}
	if _, err := none.Resolve(t.Context(), "ns", r); err == nil {
		t.Fatal("a nil Payloads resolved a reference")
	}
}

func TestRedact(t *testing.T) {
	got := Redact("s3://b/p?endpoint=h:1&access_key=AK&secret_key=SECRET")
	if strings.Contains(got, "SECRET") || !strings.Contains(got, "AK") {
		t.Fatalf("Redact = %s", got)
	}
	if got := Redact("s3://user:pw@b/p"); strings.Contains(got, "pw") {
		t.Fatalf("Redact = %s", got)
	}
}
