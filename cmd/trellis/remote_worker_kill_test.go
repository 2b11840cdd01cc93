package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/trellis-dev/trellis"
	"github.com/trellis-dev/trellis/internal/pgtest"
	"github.com/trellis-dev/trellis/internal/testport"
	"github.com/trellis-dev/trellis/store"
)

var killSteps = trellis.NewWorkflow("kill-steps", func(wc *trellis.Context, n int) (int, error) {
	for i := range 3 {
		v, err := trellis.Step(wc, fmt.Sprint("s", i), func(context.Context) (int, error) {
			time.Sleep(5 * time.Millisecond)
			return n + i, nil
		})
		if err != nil {
			return 0, err
		}
		n = v
	}
	return n, nil
})

// A server SIGKILLed twice while a remote worker runs runs and clients start
// more through it, then restarted on the same address: the worker reconnects,
// every acknowledged start finishes, each step recorded once. On SQLite
// (fsync) and Postgres.
func TestServerKilledWithRemoteWorker(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test skipped in -short mode")
	}
	t.Parallel() // a process test: beside the others (CI runs this package with -parallel 4)
	for name, url := range map[string]func(t *testing.T) string{
		"sqlite":   storeURL,
		"postgres": func(t *testing.T) string { return pgtest.SchemaURL(t) },
	} {
		t.Run(name, func(t *testing.T) { serverKilledWithRemoteWorker(t, url(t)) })
	}
}

func serverKilledWithRemoteWorker(t *testing.T, url string) {
	trellisCmd(t, "migrate", "--store", url).ok(t)
	token := strings.TrimSpace(trellisCmd(t, "tokens", "create", "--name", "all", "--grant", "producer:default",
		"--grant", "reader:default", "--grant", "worker:default", "--store", url).ok(t).stdout)
	addr := testport.Addr(t)
	base := "http://" + addr
	srv := startServerProcess(t, url, addr)
	defer func() { srv.kill(t) }()

	w := startKillStepsWorker(t, base, token)
	defer w.Client().Close()
	c, err := trellis.Open(context.Background(), trellis.Config{Server: base, Token: token})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	const runs = 150
	ids := make([]string, runs)
	var wg sync.WaitGroup
	for g := range 6 {
		wg.Go(func() {
			for i := g; i < runs; i += 6 {
				deadline := time.Now().Add(30 * time.Second)
				for {
					h, err := trellis.Start(context.Background(), c, killSteps, i,
						trellis.StartOptions{ID: fmt.Sprint("k", i), Reuse: trellis.ReuseReturnExisting})
					if err == nil {
						ids[i] = h.ID()
						break
					}
					if time.Now().After(deadline) {
						t.Errorf("start %d: %v", i, err)
						return
					}
					time.Sleep(50 * time.Millisecond)
				}
			}
		})
	}
	for range 2 {
		time.Sleep(300 * time.Millisecond)
		srv.kill(t)
		srv = startServerProcess(t, url, addr)
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	st, err := trellis.OpenExistingStore(ctxT(t), url, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	deadline := time.Now().Add(60 * time.Second)
	for i, id := range ids {
		for {
			r, err := st.RunGet(ctxT(t), &store.RunGetParams{Namespace: "default", Ref: id})
			if err != nil {
				t.Fatal(err)
			}
			if r.Status == store.StatusSucceeded {
				if want := fmt.Sprint(i + 3); string(r.Output) != want {
					t.Errorf("run %s output %s, want %s", id, r.Output, want)
				}
				break
			}
			if r.Status.Terminal() || time.Now().After(deadline) {
				t.Fatalf("run %s: %s %+v", id, r.Status, r.Error)
			}
			time.Sleep(20 * time.Millisecond)
		}
		ops, err := st.HistoryList(ctxT(t), &store.HistoryListParams{Namespace: "default", Ref: id})
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]int{}
		for _, op := range ops {
			if op.Kind == store.OpStep {
				seen[op.Name]++
			}
		}
		if len(seen) != 3 || seen["s0"] != 1 || seen["s1"] != 1 || seen["s2"] != 1 {
			t.Errorf("run %s: steps recorded %v, want s0, s1, s2 once each", id, seen)
		}
	}
}

// startKillStepsWorker starts a remote worker of killSteps on the server at
// base (a 2 s lease: a killed server's claims come back soon); the caller
// closes its client.
func startKillStepsWorker(t *testing.T, base, token string) *trellis.Worker {
	t.Helper()
	cfg := trellis.Config{Server: base, Token: token}
	cfg.Worker.LeaseDuration = 2 * time.Second
	w, err := trellis.NewWorker(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Register(context.Background(), killSteps); err != nil {
		w.Client().Close()
		t.Fatal(err)
	}
	return w
}
