package server

import (
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"testing"
	"time"
)

// BenchmarkAccessLogLine is the cost of one access log line: to a discarding
// text handler (the formatting) and to a file (the formatting and a write).
func BenchmarkAccessLogLine(b *testing.B) {
	f, err := os.Create(b.TempDir() + "/log")
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	for name, w := range map[string]io.Writer{"discard": io.Discard, "file": f} {
		b.Run(name, func(b *testing.B) {
			s := &Server{cfg: Config{Logger: slog.New(slog.NewTextHandler(w, nil))}, workerPath: "/w/"}
			r := httptest.NewRequest("POST", "/v1/namespaces/bench/runs", nil)
			r.Pattern = "POST /v1/namespaces/{ns}/runs"
			r.SetPathValue("ns", "bench")
			ri := &requestInfo{id: newRequestID(), principal: "admin"}
			aw := &accessWriter{code: 201, bytes: 700}
			b.ReportAllocs()
			for b.Loop() {
				s.logAccess(r, ri, aw, 1500*time.Microsecond)
			}
		})
	}
}
