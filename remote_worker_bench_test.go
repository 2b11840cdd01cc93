package trellis_test

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/trellis-dev/trellis"
	"github.com/trellis-dev/trellis/internal/auth"
	"github.com/trellis-dev/trellis/server"
	"github.com/trellis-dev/trellis/store"
)

var benchRemoteStep = trellis.NewWorkflow("bench-remote-step", func(wc *trellis.Context, n int) (int, error) {
	return trellis.Step(wc, "double", func(context.Context) (int, error) { return 2 * n, nil })
})

// BenchmarkRemoteWorker: one-step workflows executed by a remote worker
// through a server on SQLite (fsync), started on the store by a client
// without a worker. It reports workflows/s, claims pushed and checkpoints
// batched included.
//
//	go test -run XXX -bench BenchmarkRemoteWorker -benchtime 2000x .
func BenchmarkRemoteWorker(b *testing.B) {
	st, err := trellis.OpenStore(context.Background(), "sqlite://"+filepath.Join(b.TempDir(), "bench.db"), time.Now)
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	srv, err := server.New(context.Background(), server.Config{Backend: st, Listen: "127.0.0.1:0", IdempotencyPurgeInterval: -1})
	if err != nil {
		b.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		b.Fatal(err)
	}
	defer srv.Shutdown(context.Background())
	secret, hash, err := auth.NewToken()
	if err != nil {
		b.Fatal(err)
	}
	if _, err := st.TokenCreate(context.Background(), &store.TokenCreateParams{Name: "w", Hash: hash,
		Grants: []auth.Grant{{Role: auth.RoleWorker, Namespace: "default"}}}); err != nil {
		b.Fatal(err)
	}
	w, err := trellis.NewWorker(context.Background(), trellis.Config{Server: "http://" + srv.Addr().String(), Token: secret})
	if err != nil {
		b.Fatal(err)
	}
	if err := w.Register(context.Background(), benchRemoteStep); err != nil {
		b.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	defer func() { stop(); <-done }()
	c, err := trellis.Open(context.Background(), trellis.Config{Backend: st, Worker: trellis.WorkerOptions{Disabled: true}})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	b.ResetTimer()
	began := time.Now()
	var wg sync.WaitGroup
	ids := make(chan string, b.N)
	for range 16 { // starters, each starting runs then waiting for their results
		wg.Go(func() {
			var hs []*trellis.Handle[int]
			for id := range ids {
				h, err := trellis.Start(context.Background(), c, benchRemoteStep, 1, trellis.StartOptions{ID: id})
				if err != nil {
					b.Error(err)
					return
				}
				hs = append(hs, h)
			}
			for _, h := range hs {
				if _, err := h.Result(context.Background()); err != nil {
					b.Error(err)
				}
			}
		})
	}
	for i := range b.N {
		ids <- fmt.Sprint("r", i)
	}
	close(ids)
	wg.Wait()
	b.ReportMetric(float64(b.N)/time.Since(began).Seconds(), "workflows/s")
}
