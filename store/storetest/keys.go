package storetest

import (
	"bytes"
	"errors"
	"sync"
	"testing"

	"github.com/trellis-dev/trellis/store"
)

var keyCases = []testCase{
	{"FirstKept", keyFirstKept},
	{"ConcurrentAgree", keyConcurrentAgree},
	{"InvalidParams", keyInvalidParams},
}

func fillKey(b byte) []byte { return bytes.Repeat([]byte{b}, store.MinSecretKeySize) }

func (e *env) secretKey(name string, newKey []byte) []byte {
	e.t.Helper()
	k, err := e.st.SecretKey(e.ctx, &store.SecretKeyParams{Name: name, New: newKey})
	if err != nil {
		e.t.Fatalf("SecretKey(%s): %v", name, err)
	}
	return k
}

// The first key of a name is kept and returned ever after; names are apart.
func keyFirstKept(t *testing.T, e *env) {
	if k := e.secretKey("lease", fillKey(1)); !bytes.Equal(k, fillKey(1)) {
		t.Fatalf("first SecretKey = %x, want the new key", k)
	}
	if k := e.secretKey("lease", fillKey(2)); !bytes.Equal(k, fillKey(1)) {
		t.Fatalf("second SecretKey = %x, want the first key kept", k)
	}
	if k := e.secretKey("other", fillKey(3)); !bytes.Equal(k, fillKey(3)) {
		t.Fatalf("SecretKey of another name = %x, want its own new key", k)
	}
}

// Callers that race for a name's first key all get the same one.
func keyConcurrentAgree(t *testing.T, e *env) {
	const n = 8
	got := make([][]byte, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			k, err := e.st.SecretKey(e.ctx, &store.SecretKeyParams{Name: "race", New: fillKey(byte(10 + i))})
			if err != nil {
				t.Errorf("SecretKey: %v", err)
			}
			got[i] = k
		})
	}
	wg.Wait()
	for i := range got {
		if !bytes.Equal(got[i], got[0]) {
			t.Fatalf("caller %d got %x, caller 0 %x: want one key", i, got[i], got[0])
		}
	}
}

func keyInvalidParams(t *testing.T, e *env) {
	for _, p := range []*store.SecretKeyParams{
		{Name: "", New: fillKey(1)},
		{Name: "short", New: []byte("too short")},
	} {
		if _, err := e.st.SecretKey(e.ctx, p); !errors.Is(err, store.ErrInvalidParams) {
			t.Errorf("SecretKey(%q, %d bytes) = %v, want ErrInvalidParams", p.Name, len(p.New), err)
		}
	}
	if k := e.secretKey("short", fillKey(4)); !bytes.Equal(k, fillKey(4)) {
		t.Errorf("after refused calls, SecretKey = %x, want the first valid key", k)
	}
}
