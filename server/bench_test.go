package server

import (
	"bytes"
	"context"
	"path/filepath"

	"github.com/trellis-dev/trellis"
	"io"
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkAPIStart: POST …/runs from 64 keep-alive clients on SQLite (fsync),
// each start durable before its 201 (the api-start workload, in process).
func BenchmarkAPIStart(b *testing.B) { benchStarts(b, false) }

// BenchmarkAPIStartKeyed is BenchmarkAPIStart with an Idempotency-Key on every
// start (each its own): the key is looked up, then written with the run.
func BenchmarkAPIStartKeyed(b *testing.B) { benchStarts(b, true) }

func benchStarts(b *testing.B, keyed bool) {
	e := newBenchEnv(b)
	var keys atomic.Int64
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64, MaxConnsPerHost: 64}}
	body := []byte(`{"workflow":"bench","input":{"n":1}}`)
	b.SetParallelism(32) // 64 goroutines on 2 cores
	start := time.Now()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			req, _ := http.NewRequest("POST", e+"/v1/namespaces/default/runs", bytes.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Authorization", "Bearer producer")
			if keyed {
				req.Header.Set(IdempotencyKeyHeader, "start-"+strconv.FormatInt(keys.Add(1), 10))
			}
			res, err := client.Do(req)
			if err != nil {
				b.Error(err)
				return
			}
			io.Copy(io.Discard, res.Body)
			res.Body.Close()
			if res.StatusCode != 201 {
				b.Errorf("status %d", res.StatusCode)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "starts/s")
}

// newBenchEnv starts a server on a fresh SQLite store and returns its base URL.
func newBenchEnv(b *testing.B) string {
	st, err := trellis.OpenStore(context.Background(), "sqlite://"+filepath.Join(b.TempDir(), "trellis.db"), time.Now)
	if err != nil {
		b.Fatal(err)
	}
	srv, err := New(context.Background(), Config{Backend: st, Listen: "127.0.0.1:0", Authenticator: testTokens()})
	if err != nil {
		b.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		srv.Shutdown(context.Background())
		st.Close()
	})
	return "http://" + srv.Addr().String()
}
