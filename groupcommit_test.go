package trellis_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/trellis-dev/trellis"
	"github.com/trellis-dev/trellis/internal/auth"
	"github.com/trellis-dev/trellis/store"
)

// The server group-commits the checkpoints of all its remote workers: while its
// store's writer is busy with one commit, the checkpoints that several workers
// send queue up, and the next commit writes them in one transaction (one fsync).
// Each worker runs one run at a time, so it has one checkpoint in flight at most:
// a commit of k checkpoints holds the checkpoints of k workers.
func TestServerGroupCommitsWorkersCheckpoints(t *testing.T) {
	const workers = 6
	for name, url := range remoteStores() {
		t.Run(name, func(t *testing.T) {
			u := url(t)
			if name == "postgres" {
				// Postgres commits with two writers by default, each its own
				// batches: with one, holding it holds every commit.
				u += "&writers=1"
			}
			s := newWorkerServer(t, u)
			obs, ok := s.st.(store.CommitObserver)
			if !ok {
				t.Fatalf("%T does not report its commits", s.st)
			}
			// The observer runs on the writer's goroutine after each commit: while
			// it waits on hold, the writer commits nothing and requests queue.
			var (
				mu    sync.Mutex
				sizes []int
				hold  chan struct{}
			)
			held := make(chan struct{}, 1)
			obs.ObserveCommits(func(n int, _ time.Duration) {
				mu.Lock()
				sizes = append(sizes, n)
				h := hold
				hold = nil
				mu.Unlock()
				if h != nil {
					held <- struct{}{}
					<-h
				}
			})

			gate := make(chan struct{})
			entered := make(chan string, workers)
			wf := trellis.NewWorkflow("group-commit", func(wc *trellis.Context, i int) (int, error) {
				return trellis.Step(wc, "wait", func(ctx context.Context) (int, error) {
					entered <- wc.RunID()
					<-gate
					return i, nil
				})
			})
			wtok := s.token(t, "w", auth.Grant{Role: auth.RoleWorker, Namespace: "default"})
			for range workers {
				cfg := trellis.Config{Server: s.base, Token: wtok}
				cfg.Worker.Concurrency = 1
				cfg.Worker.LeaseDuration = time.Minute // no lease extension during the test
				cfg.Worker.ShutdownGrace = 2 * time.Second
				startRemoteWorkerWith(t, cfg, wf)
			}
			// Cleanups run last first: the steps return before the workers stop.
			var opened sync.Once
			openGate := func() { opened.Do(func() { close(gate) }) }
			t.Cleanup(openGate)
			client := open(t, "", func(c *trellis.Config) { c.Store, c.Backend, c.Worker.Disabled = "", s.st, true })
			ids := make([]string, workers)
			for i := range workers {
				h, err := trellis.Start(context.Background(), client, wf, i)
				if err != nil {
					t.Fatal(err)
				}
				ids[i] = h.RunID()
			}
			// Every worker holds one run, in its step.
			for range workers {
				select {
				case <-entered:
				case <-time.After(30 * time.Second):
					t.Fatal("the workers did not all start a run")
				}
			}

			// Hold the writer after its next commit: a start of a run nobody
			// serves makes one, unless another write (a worker's record, say)
			// comes first, whose commit is held then, with the start queued
			// behind it. So the start runs on its own goroutine.
			release := make(chan struct{})
			mu.Lock()
			hold = release
			first := len(sizes)
			mu.Unlock()
			startErr := make(chan error, 1)
			go func() {
				_, err := client.StartRaw(context.Background(), "nobody-serves", []byte("null"), trellis.StartOptions{})
				startErr <- err
			}()
			select {
			case <-held:
			case <-time.After(30 * time.Second):
				t.Fatal("the writer committed nothing after the start")
			}
			// The steps end and each worker sends its checkpoint, which waits
			// in the writer's queue. The pause lets them arrive; the assertion
			// below holds whenever two of them have.
			openGate()
			time.Sleep(time.Second)
			close(release)
			if err := <-startErr; err != nil {
				t.Fatal(err)
			}

			for _, id := range ids {
				run, err := client.Wait(context.Background(), id)
				if err != nil {
					t.Fatal(err)
				}
				if run.Status != trellis.StatusSucceeded {
					t.Fatalf("run %s: %s %+v", id, run.Status, run.Error)
				}
			}
			// The writer answers a batch's requests before it reports the
			// commit: the last report may come just after the last Wait.
			deadline := time.Now().Add(10 * time.Second)
			mu.Lock()
			defer mu.Unlock()
			for len(sizes) < first+2 && time.Now().Before(deadline) {
				mu.Unlock()
				time.Sleep(10 * time.Millisecond)
				mu.Lock()
			}
			// sizes[first] is the held commit; the one after it took what
			// queued meanwhile.
			if len(sizes) < first+2 {
				t.Fatalf("commits %v: none after the writer was released", sizes)
			}
			if n := sizes[first+1]; n < 2 {
				t.Fatalf("the commit after the writer was released wrote %d request(s) (commits %v), want the checkpoints of several workers", n, sizes[first:])
			}
			t.Logf("commit after the release: %d requests from %d workers waiting; commits since: %v", sizes[first+1], workers, sizes[first:])
		})
	}
}
