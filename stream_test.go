package trellis_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/trellis-dev/trellis"
	"github.com/trellis-dev/trellis/internal/pgtest"
	"github.com/trellis-dev/trellis/server"
	"github.com/trellis-dev/trellis/store"
)

// streamWF emits, waits for "go" (the run is released and replayed after it),
// emits again around a step that fails once, and returns "done".
var streamWF = trellis.NewWorkflow("stream-wf", func(wc *trellis.Context, _ any) (string, error) {
	for i := range 3 {
		if err := trellis.Emit(wc, "a", i); err != nil {
			return "", err
		}
	}
	if _, err := trellis.WaitEvent[string](wc, "go", 0); err != nil {
		return "", err
	}
	if err := trellis.Emit(wc, "b", "x"); err != nil {
		return "", err
	}
	failed := false
	if _, err := trellis.Step(wc, "flaky", func(context.Context) (int, error) {
		if !failed {
			failed = true
			return 0, errors.New("once")
		}
		return 1, nil
	}, trellis.StepOptions{Retry: trellis.RetryPolicy{Backoff: trellis.Fixed(time.Millisecond)}}); err != nil {
		return "", err
	}
	return "done", nil
})

var streamWFNames = []string{"run.started", "a", "a", "a", "run.waiting", "run.resumed", "b", "step.failed", "step.completed", "run.succeeded"}

// collect reads n events of the stream (all of them when n < 0) and checks
// that they are numbered from first on without gaps.
func collect(t *testing.T, it func(func(*trellis.StreamEvent, error) bool), first int64, n int) []string {
	t.Helper()
	var names []string
	for ev, err := range it {
		if err != nil {
			t.Fatalf("stream: %v (after %v)", err, names)
		}
		if ev.Sequence != first+int64(len(names)) {
			t.Fatalf("event %s has sequence %d, want %d (after %v)", ev.Name, ev.Sequence, first+int64(len(names)), names)
		}
		if !json.Valid(ev.Data) {
			t.Fatalf("event %d: data %q is not JSON", ev.Sequence, ev.Data)
		}
		names = append(names, ev.Name)
		if len(names) == n {
			break
		}
	}
	return names
}

func wantNames(t *testing.T, got, want []string) {
	t.Helper()
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("events %v, want %v", got, want)
	}
}

// TestStreamEmbedded: Emit and the lifecycle reach an embedded client's
// Stream live, once each although the run was replayed after its wait.
func TestStreamEmbedded(t *testing.T) {
	c := setup(t, streamWF)
	ctx := ctxT(t)
	h, err := trellis.Start(ctx, c, streamWF, nil, trellis.StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got := collect(t, c.Stream(ctx, h.RunID(), 0), 1, 5)
	wantNames(t, got, streamWFNames[:5])
	if err := c.SendEvent(ctx, h.RunID(), "go", "x"); err != nil {
		t.Fatal(err)
	}
	wantNames(t, collect(t, c.Stream(ctx, h.RunID(), 5), 6, -1), streamWFNames[5:])
	// Finished: the whole stream replays and ends; StreamNow gives nothing.
	wantNames(t, collect(t, c.Stream(ctx, h.RunID(), 0), 1, -1), streamWFNames)
	wantNames(t, collect(t, c.Stream(ctx, h.RunID(), trellis.StreamNow), 1, -1), nil)
	for _, bad := range []string{"", "run.x", "step.y"} {
		if err := emitOutside(bad); !errors.Is(err, trellis.ErrInvalidParams) {
			t.Fatalf("Emit(%q): %v, want ErrInvalidParams", bad, err)
		}
	}
	for _, err := range c.Stream(ctx, "no-such-run", 0) {
		if !errors.Is(err, trellis.ErrRunNotFound) {
			t.Fatalf("Stream of an unknown run: %v", err)
		}
	}
}

// emitOutside checks Emit's name validation, which needs no run.
func emitOutside(name string) error { return trellis.Emit(nil, name, 1) }

// TestStreamCancelNeverStarted: a run the store cancels before any worker saw it
// still ends its stream with run.cancelled.
func TestStreamCancelNeverStarted(t *testing.T) {
	c := open(t, storeURL(t), func(cfg *trellis.Config) { cfg.Worker.Disabled = true })
	ctx := ctxT(t)
	h, err := trellis.Start(ctx, c, streamWF, nil, trellis.StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Cancel(ctx, h.RunID()); err != nil {
		t.Fatal(err)
	}
	wantNames(t, collect(t, c.Stream(ctx, h.RunID(), 0), 1, -1), []string{"run.cancelled"})
}

// startServer starts a server on st listening on addr ("127.0.0.1:0": any).
func startServer(t *testing.T, st store.Store, addr string) *server.Server {
	t.Helper()
	srv, err := server.New(context.Background(), server.Config{Backend: st, Listen: addr, Insecure: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { shutdown(t, srv) })
	return srv
}

func shutdown(t *testing.T, srv *server.Server) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		t.Errorf("shutdown: %v", err)
	}
}

func remoteClient(t *testing.T, base string) *trellis.Client {
	t.Helper()
	c, err := trellis.Open(context.Background(), trellis.Config{Server: base})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// TestStreamServerRestart: a client streaming through a server that restarts
// mid-stream reconnects from the last sequence it delivered and loses nothing.
func TestStreamServerRestart(t *testing.T) {
	st := openStore(t, storeURL(t))
	w := open(t, "", func(c *trellis.Config) { c.Store, c.Backend = "", st })
	register(t, w, streamWF)
	srv := startServer(t, st, "127.0.0.1:0")
	addr := srv.Addr().String()
	c := remoteClient(t, "http://"+addr)
	ctx := ctxT(t)
	h, err := trellis.Start(ctx, w, streamWF, nil, trellis.StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	var seqs []int64
	restarted := false
	for ev, err := range c.Stream(ctx, h.RunID(), 0) {
		if err != nil {
			t.Fatalf("stream: %v (after %v)", err, got)
		}
		got, seqs = append(got, ev.Name), append(seqs, ev.Sequence)
		if ev.Name == "run.waiting" && !restarted {
			restarted = true
			shutdown(t, srv) // the stream drops mid-run
			if err := w.SendEvent(ctx, h.RunID(), "go", "x"); err != nil {
				t.Fatal(err)
			}
			waitStatus(t, w, h.RunID(), trellis.StatusSucceeded)
			startServer(t, st, addr) // a new server on the same address
		}
	}
	wantNames(t, got, streamWFNames)
	for i, s := range seqs {
		if s != int64(i+1) {
			t.Fatalf("sequences %v: not 1..n once each", seqs)
		}
	}
}

// TestStreamAcrossServers: two servers on one Postgres; a stream opened on one
// sees the events of a run that a worker on another store connection (another
// server's process) advances: the wake-ups travel by NOTIFY.
func TestStreamAcrossServers(t *testing.T) {
	url := pgtest.SchemaURL(t)
	st1, st2, stw := openStore(t, url), openStore(t, url), openStore(t, url)
	srv1 := startServer(t, st1, "127.0.0.1:0")
	srv2 := startServer(t, st2, "127.0.0.1:0")
	w := open(t, "", func(c *trellis.Config) { c.Store, c.Backend = "", stw })
	register(t, w, streamWF)
	ctx := ctxT(t)
	via2 := remoteClient(t, "http://"+srv2.Addr().String())
	run, err := via2.StartRaw(ctx, "stream-wf", []byte("null"), trellis.StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	via1 := remoteClient(t, "http://"+srv1.Addr().String())
	var got []string
	for ev, err := range via1.Stream(ctx, run.ID, 0) {
		if err != nil {
			t.Fatalf("stream: %v (after %v)", err, got)
		}
		got = append(got, ev.Name)
		if ev.Name == "run.waiting" {
			if err := via2.SendEvent(ctx, run.ID, "go", "x"); err != nil {
				t.Fatal(err)
			}
		}
	}
	wantNames(t, got, streamWFNames)
}

// TestStreamJob: a job writes nothing to its stream (its outcome is its one
// write), yet a follower that was waiting when it ended gets its final event,
// made from its record, and the stream ends: the end of the run wakes the
// follower (on Postgres, through another connection's NOTIFY).
func TestStreamJob(t *testing.T) {
	release := make(chan struct{})
	job := trellis.NewJob("stream-job", func(ctx context.Context, n int) (int, error) {
		select {
		case <-release:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
		if n < 0 {
			return 0, trellis.NonRetryable(errors.New("negative"))
		}
		return 2 * n, nil
	})
	c := setup(t, job)
	ctx := ctxT(t)
	for _, c2 := range []struct {
		in   int
		want string
	}{{21, `run.succeeded={"result":42}`}, {-1, `run.failed={"error":{"message":"negative","non_retryable":true}}`}} {
		h, err := trellis.StartJob(ctx, c, job, c2.in)
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan []string, 1)
		go func() {
			var evs []string
			for ev, err := range c.Stream(ctx, h.RunID(), 0) {
				if err != nil {
					evs = append(evs, "error: "+err.Error())
					break
				}
				evs = append(evs, fmt.Sprintf("%s=%s", ev.Name, ev.Data))
			}
			got <- evs
		}()
		waitStatus(t, c, h.RunID(), trellis.StatusRunning)
		release <- struct{}{}
		evs := <-got
		if len(evs) != 1 || evs[0] != c2.want {
			t.Fatalf("job(%d) stream = %v, want [%s]", c2.in, evs, c2.want)
		}
	}
}

// Handle.Result and Wait through a server ride out its restart: the long poll
// that the stopping server ends, and the calls that find nothing listening,
// are tried again until the new server on the same address answers.
func TestResultSurvivesServerRestart(t *testing.T) {
	st := openStore(t, storeURL(t))
	w := open(t, "", func(c *trellis.Config) { c.Store, c.Backend = "", st })
	register(t, w, streamWF)
	srv := startServer(t, st, "127.0.0.1:0")
	addr := srv.Addr().String()
	c := remoteClient(t, "http://"+addr)
	ctx := ctxT(t)
	h, err := trellis.Start(ctx, w, streamWF, nil, trellis.StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waitStatus(t, w, h.RunID(), trellis.StatusWaiting) // for event "go"
	remote := must[*trellis.Handle[string]](t)(trellis.GetHandle(ctx, c, streamWF, h.RunID()))
	type outcome struct {
		out string
		err error
	}
	result, waited := make(chan outcome, 1), make(chan outcome, 1)
	go func() { out, err := remote.Result(ctx); result <- outcome{out, err} }()
	go func() {
		run, err := c.Wait(ctx, h.RunID())
		if err == nil {
			waited <- outcome{string(run.Status), nil}
			return
		}
		waited <- outcome{"", err}
	}()
	time.Sleep(200 * time.Millisecond) // both long polls are in flight
	shutdown(t, srv)
	time.Sleep(2 * time.Second) // calls find nothing listening, longer than a call's tries last
	if err := w.SendEvent(ctx, h.RunID(), "go", "x"); err != nil {
		t.Fatal(err)
	}
	startServer(t, st, addr) // a new server on the same address
	if r := <-result; r.err != nil || r.out != "done" {
		t.Fatalf("Result across the restart: %q, %v", r.out, r.err)
	}
	if r := <-waited; r.err != nil || r.out != string(trellis.StatusSucceeded) {
		t.Fatalf("Wait across the restart: %q, %v", r.out, r.err)
	}
}
