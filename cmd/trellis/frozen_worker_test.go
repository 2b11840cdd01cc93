package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/trellis-dev/trellis"
	"github.com/trellis-dev/trellis/internal/pgtest"
)

// frozenLease is the workers' lease in TestFrozenRemoteWorker: short, so that
// a frozen worker lets several leases lapse, yet long against the heartbeat
// (a third of it) of the live worker on a loaded machine.
const frozenLease = 3 * time.Second

// A remote worker process SIGSTOPped for more than two leases while runs keep
// being started through the server, a second worker alive, then SIGCONTed. The
// runs the frozen worker held, and those claimed or handed off to it before
// the server saw its lease lapse, go to the live worker: none goes back down
// the frozen worker's stream (each run is claimed at most twice), and after
// SIGCONT the frozen worker starts no step of a run another worker executed
// (the claims that waited in its connection past their leases are dropped,
// the runs it held stop at their first fenced write). Every run succeeds with
// each step recorded once. On SQLite and Postgres.
func TestFrozenRemoteWorker(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real server and worker processes")
	}
	t.Parallel() // a process test: beside the others (CI runs this package with -parallel 4)
	for name, url := range map[string]func(t *testing.T) string{
		"sqlite":   storeURL,
		"postgres": func(t *testing.T) string { return pgtest.SchemaURL(t) },
	} {
		t.Run(name, func(t *testing.T) { frozenRemoteWorker(t, url(t)) })
	}
}

func frozenRemoteWorker(t *testing.T, url string) {
	trellisCmd(t, "migrate", "--store", url).ok(t)
	token := strings.TrimSpace(trellisCmd(t, "tokens", "create", "--name", "all", "--grant", "worker:default",
		"--grant", "producer:default", "--grant", "reader:default", "--store", url).ok(t).stdout)
	srv := startTrellisServer(t, "--store", url, "--listen", "127.0.0.1:0")
	dir := t.TempDir()
	lease := envStepLogLease + "=" + frozenLease.String()
	frozen := startStepLogWorker(t, "frozen", srv.base(), token, dir, false, lease)
	live := startStepLogWorker(t, "live", srv.base(), token, dir, false, lease)
	c, err := trellis.Open(ctxT(t), trellis.Config{Server: srv.base(), Token: token})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	waitFor(t, "two live workers", 60*time.Second, func() bool {
		ws, err := c.Workers(ctxT(t))
		n := 0
		for _, w := range ws {
			if w.Live {
				n++
			}
		}
		return err == nil && n == 2
	})

	// Runs are started all along, one at a time by each of three clients.
	wf := stepLogWorkflow(nil, nil)
	ctx, stop := context.WithCancel(context.Background())
	var (
		mu  sync.Mutex
		ids []string
		wg  sync.WaitGroup
	)
	defer func() { stop(); wg.Wait() }()
	for g := range 3 {
		wg.Go(func() {
			for i := 0; ctx.Err() == nil; i++ {
				h, err := trellis.Start(ctx, c, wf, i, trellis.StartOptions{ID: fmt.Sprintf("frozen-%d-%d", g, i)})
				if err != nil {
					if ctx.Err() == nil {
						t.Errorf("start: %v", err)
					}
					return
				}
				mu.Lock()
				ids = append(ids, h.RunID())
				mu.Unlock()
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
	steps := filepath.Join(dir, frozen.name+".steps")
	waitFor(t, frozen.name+" to execute steps", 60*time.Second, func() bool {
		fi, err := os.Stat(steps)
		return err == nil && fi.Size() > 2000
	})
	frozen.signal(syscall.SIGSTOP)
	time.Sleep(2*frozenLease + frozenLease/2) // leases lapse; starts go on
	resumed := time.Now()
	frozen.signal(syscall.SIGCONT)
	time.Sleep(time.Second)
	stop()
	wg.Wait()
	if t.Failed() {
		return
	}
	wctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	takenOver := 0
	for _, id := range ids {
		run, err := c.Wait(wctx, id)
		if err != nil || run.Status != trellis.StatusSucceeded {
			t.Fatalf("run %s: %+v, %v", id, run, err)
		}
		if run.Attempts > 2 {
			t.Errorf("run %s was claimed %d times: a lapsed lease went back to the frozen worker", id, run.Attempts)
		}
		if run.Attempts == 2 {
			takenOver++
		}
	}
	time.Sleep(frozenLease) // what the resumed worker would still do, it does now
	workers := []*stepLogWorker{frozen, live}
	for _, w := range workers { // a graceful stop: their last lines are written
		w.signal(syscall.SIGTERM)
	}
	for _, w := range workers {
		select {
		case <-w.done:
		case <-time.After(30 * time.Second):
			t.Errorf("worker %s did not stop within 30s of SIGTERM", w.name)
			w.signal(syscall.SIGKILL)
			<-w.done
		}
	}
	execs := readStepLogs(t, dir, workers)
	readLostLeases(t, dir, workers) // logs what they said
	checkStepLogHistories(t, c, ids, execs)
	// A goroutine the SIGSTOP caught between its lease check (a clock read)
	// and the step's call resumes past the check: no check can close that
	// window, which at-most-once steps exist for. One such re-execution,
	// started at the very moment of SIGCONT, is tolerated and logged; a
	// worker that did not check would re-run the steps of every run taken
	// over from it, and later too.
	const window = 100 * time.Millisecond
	after, again, inWindow := 0, 0, 0
	for id, es := range execs {
		for _, e := range es {
			if e.worker != frozen.name || !e.start.After(resumed) {
				continue
			}
			after++
			for _, o := range es {
				if o != e && o.pos == e.pos {
					again++
					if e.start.Sub(resumed) < window && inWindow == 0 {
						inWindow++
						t.Logf("run %s: step %d ran again in %s at SIGCONT (%s), also %s: paused between its lease check and the step", id, e.pos, frozen.name, e, o)
						continue
					}
					t.Errorf("run %s: step %d ran again in %s after SIGCONT (%s), also %s", id, e.pos, frozen.name, e, o)
				}
			}
		}
	}
	if takenOver == 0 {
		t.Errorf("no run was taken over from the frozen worker: the test froze nothing that mattered")
	}
	t.Logf("%d runs, %d taken over from the frozen worker; after SIGCONT it started %d step executions, %d of them again",
		len(ids), takenOver, after, again)
}
