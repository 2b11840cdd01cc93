package trellis_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/trellis-dev/trellis"
)

// BenchmarkPayloadJSON encodes and decodes a 1 MiB JSON payload (a string) as
// the HTTP API's answers and the client's reads do: a result, an input, a
// step's result in a history. Large payloads (up to a queue's limit, 50 MiB
// and more) cross it several times per run.
func BenchmarkPayloadJSON(b *testing.B) {
	p := trellis.Payload(`"` + strings.Repeat("a", 1<<20) + `"`)
	b.Run("Marshal", func(b *testing.B) {
		b.SetBytes(int64(len(p)))
		for b.Loop() {
			if _, err := json.Marshal(p); err != nil {
				b.Fatal(err)
			}
		}
	})
	enc, err := json.Marshal(p)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("Unmarshal", func(b *testing.B) {
		b.SetBytes(int64(len(enc)))
		for b.Loop() {
			var back trellis.Payload
			if err := json.Unmarshal(enc, &back); err != nil {
				b.Fatal(err)
			}
		}
	})
}
