package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/trellis-dev/trellis"
	"github.com/trellis-dev/trellis/server"
	"github.com/trellis-dev/trellis/store"
)

// The stream workloads (s1, s2, s3) measure the server's event streams
// (docs/streams.md). `trellis bench` has no --server flag: s1 and s2 start a
// server in the bench's process on the store (one store handle shared by the
// server and the worker, as `trellis dev` does), and their clients read its
// SSE streams over loopback HTTP; s3 starts `trellis server` as a child process,
// so that its resident set is the server's alone.

// emitter emits in.Events events named "e", each carrying the time it was
// emitted (unix ns), in.Every of them before each no-op step, which is what
// checkpoints them; with in.Gate it first waits for the event "go".
var emitter = trellis.NewWorkflow("bench-emitter", func(wc *trellis.Context, in emitIn) (int, error) {
	if in.Gate {
		if _, err := trellis.WaitEvent[string](wc, "go", 0); err != nil {
			return 0, err
		}
	}
	for i := range in.Events {
		if err := trellis.Emit(wc, "e", emitted{I: i, At: time.Now().UnixNano()}); err != nil {
			return 0, err
		}
		if (i+1)%in.Every == 0 || i == in.Events-1 {
			if _, err := trellis.Step(wc, "pace", func(context.Context) (int, error) {
				time.Sleep(in.Pause)
				return i, nil
			}); err != nil {
				return 0, err
			}
		}
	}
	return in.Events, nil
})

type emitIn struct {
	Events int           `json:"events"`
	Every  int           `json:"every"`
	Pause  time.Duration `json:"pause"`
	Gate   bool          `json:"gate"`
}

type emitted struct {
	I  int   `json:"i"`
	At int64 `json:"at"`
}

// streamEnv is a server in this process on a store it shares with a worker.
type streamEnv struct {
	st     store.Store
	worker *trellis.Client
	srv    *server.Server
	base   string
}

func newStreamEnv(ctx context.Context, o Options) (*streamEnv, error) {
	st, err := trellis.OpenStore(ctx, o.Store, time.Now)
	if err != nil {
		return nil, err
	}
	e := &streamEnv{st: st}
	cfg := trellis.Config{Backend: st, Namespace: "bench"}
	cfg.Worker.Concurrency = o.Concurrency
	if e.worker, err = trellis.Open(ctx, cfg); err != nil {
		st.Close()
		return nil, err
	}
	if err := e.worker.Register(ctx, emitter); err != nil {
		e.close()
		return nil, err
	}
	e.srv, err = server.New(ctx, server.Config{Backend: st, Listen: "127.0.0.1:0", Insecure: true})
	if err == nil {
		err = e.srv.Start()
	}
	if err != nil {
		e.close()
		return nil, err
	}
	e.base = "http://" + e.srv.Addr().String()
	return e, nil
}

func (e *streamEnv) close() {
	if e.srv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = e.srv.Shutdown(ctx)
	}
	e.worker.Close()
	e.st.Close()
}

// remote is a client of the server (SSE through Client.Stream).
func (e *streamEnv) remote(ctx context.Context) (*trellis.Client, error) {
	return trellis.Open(ctx, trellis.Config{Server: e.base, Namespace: "bench"})
}

// runS1: one run emits n events, one every ~2 ms; an SSE client of the server
// reads them; the latency of each is from Emit to its arrival at the client.
func runS1(ctx context.Context, n int, o Options) (*Result, error) {
	e, err := newStreamEnv(ctx, o)
	if err != nil {
		return nil, err
	}
	defer e.close()
	rc, err := e.remote(ctx)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	h, err := trellis.Start(ctx, e.worker, emitter, emitIn{Events: n, Every: 1, Pause: 2 * time.Millisecond, Gate: true})
	if err != nil {
		return nil, err
	}
	lat := make([]time.Duration, 0, n)
	start := time.Now()
	sent := false
	for ev, err := range rc.Stream(ctx, h.RunID(), 0) {
		if err != nil {
			return nil, err
		}
		now := time.Now()
		switch ev.Name {
		case "run.waiting":
			if !sent {
				sent, start = true, time.Now()
				if err := e.worker.SendEvent(ctx, h.RunID(), "go", ""); err != nil {
					return nil, err
				}
			}
		case "e":
			var em emitted
			if err := json.Unmarshal(ev.Data, &em); err != nil {
				return nil, err
			}
			lat = append(lat, now.Sub(time.Unix(0, em.At)))
		}
	}
	if len(lat) != n {
		return nil, fmt.Errorf("s1: the client received %d of %d events", len(lat), n)
	}
	wall := time.Since(start)
	return &Result{WallS: wall.Seconds(), P50Ms: percentile(lat, 50), P99Ms: percentile(lat, 99)}, nil
}

// runS2: subs SSE subscribers (default 1,000) on one run, which emits n events
// as fast as its checkpoints go (10 per checkpoint); every subscriber must get
// every event once, in order. events_per_s is the events delivered (n × subs)
// per second, from the gate's opening to the last delivery.
func runS2(ctx context.Context, n int, o Options) (*Result, error) {
	subs := o.Subscribers
	if subs <= 0 {
		subs = 1000
	}
	e, err := newStreamEnv(ctx, o)
	if err != nil {
		return nil, err
	}
	defer e.close()
	rc, err := e.remote(ctx)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	h, err := trellis.Start(ctx, e.worker, emitter, emitIn{Events: n, Every: 10, Gate: true})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		ready, done sync.WaitGroup
		mu          sync.Mutex
		firstErr    error
		lastAt      time.Time
	)
	fail := func(err error) {
		mu.Lock()
		if firstErr == nil {
			firstErr = err
		}
		mu.Unlock()
		cancel()
	}
	ready.Add(subs)
	done.Add(subs)
	for s := range subs {
		go func() {
			defer done.Done()
			waiting, next := false, 0
			for ev, err := range rc.Stream(ctx, h.RunID(), 0) {
				if err != nil {
					if !waiting {
						ready.Done()
					}
					fail(fmt.Errorf("subscriber %d: %w", s, err))
					return
				}
				switch ev.Name {
				case "run.waiting":
					if !waiting {
						waiting = true
						ready.Done()
					}
				case "e":
					var em emitted
					if err := json.Unmarshal(ev.Data, &em); err != nil || em.I != next {
						fail(fmt.Errorf("subscriber %d: event %d out of order (want %d): %v", s, em.I, next, err))
						return
					}
					next++
				}
			}
			if next != n {
				fail(fmt.Errorf("subscriber %d: got %d of %d events", s, next, n))
				return
			}
			mu.Lock()
			lastAt = time.Now()
			mu.Unlock()
		}()
	}
	ready.Wait()
	start := time.Now()
	if firstErr == nil {
		if err := e.worker.SendEvent(ctx, h.RunID(), "go", ""); err != nil {
			fail(err)
		}
	}
	done.Wait()
	if firstErr != nil {
		return nil, firstErr
	}
	wall := lastAt.Sub(start)
	delivered := float64(n) * float64(subs)
	return &Result{WallS: wall.Seconds(), EventsPerS: ptr(delivered / wall.Seconds()), Subscribers: subs}, nil
}

// runS3: subs idle SSE subscribers (default 10,000) on one `trellis server`
// child process, each a raw connection whose stream is open and silent (a run
// that no worker serves, after=now). rss_per_subscriber_kb is the growth of the
// server's resident set per open stream.
func runS3(ctx context.Context, _ int, o Options) (*Result, error) {
	subs := o.Subscribers
	if subs <= 0 {
		subs = 10000
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, exe, "server", "--store", o.Store, "--listen", addr, "--insecure")
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("s3 starts `trellis server` (run it from the trellis binary): %w", err)
	}
	defer func() {
		_ = cmd.Process.Signal(os.Interrupt)
		_ = cmd.Wait()
	}()
	base := "http://" + addr
	if err := waitHealthy(ctx, base); err != nil {
		return nil, err
	}
	c, err := trellis.Open(ctx, trellis.Config{Server: base, Namespace: "bench"})
	if err != nil {
		return nil, err
	}
	defer c.Close()
	run, err := c.StartRaw(ctx, "bench-idle-nobody-serves", []byte("null"), trellis.StartOptions{})
	if err != nil {
		return nil, err
	}
	req := "GET /v1/namespaces/bench/runs/" + run.ID + "/stream?after=now HTTP/1.1\r\nHost: " + addr + "\r\nAccept: text/event-stream\r\n\r\n"
	// Warm the server's paths with one stream, then measure from there.
	warm, err := openRaw(addr, req)
	if err != nil {
		return nil, err
	}
	defer warm.Close()
	time.Sleep(500 * time.Millisecond)
	before, err := rssOf(cmd.Process.Pid)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	conns := make([]net.Conn, 0, subs)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range subs {
		conn, err := openRaw(addr, req)
		if err != nil {
			return nil, fmt.Errorf("s3: opening stream %d: %w", len(conns)+1, err)
		}
		conns = append(conns, conn)
	}
	wall := time.Since(start)
	time.Sleep(2 * time.Second) // let the server settle
	after, err := rssOf(cmd.Process.Pid)
	if err != nil {
		return nil, err
	}
	perSub := (after - before) / float64(subs)
	return &Result{WallS: wall.Seconds(), Subscribers: subs, RSSPerSubscriberKB: &perSub,
		RSSIdleMB: ptr(before / 1024), RSSWaitingMB: ptr(after / 1024)}, nil
}

// openRaw opens a connection, sends req and reads the answer's head: 200 and
// text/event-stream, else an error. The connection is then left idle.
func openRaw(addr, req string) (net.Conn, error) {
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	if _, err := conn.Write([]byte(req)); err != nil {
		conn.Close()
		return nil, err
	}
	_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	br := bufio.NewReaderSize(conn, 512)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		conn.Close()
		return nil, err
	}
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		conn.Close()
		return nil, fmt.Errorf("stream answered %s %s", resp.Status, resp.Header.Get("Content-Type"))
	}
	_ = conn.SetReadDeadline(time.Time{})
	return conn, nil
}

// freeAddr returns a loopback address with a port free now.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

func waitHealthy(ctx context.Context, base string) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(base + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return errors.New("s3: the server did not become ready")
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// rssOf reads a process's resident set in KiB (Linux).
func rssOf(pid int) (float64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			return kb, err
		}
	}
	return 0, errors.New("no VmRSS")
}

func ptr(v float64) *float64 { return &v }
