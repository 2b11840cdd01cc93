package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/trellis-dev/trellis"
	"github.com/trellis-dev/trellis/server"
	"github.com/trellis-dev/trellis/store"
)

// The stream workloads (s1, s2, s3) measure a server's event streams
// (docs/streams.md) from outside: with `trellis bench --server URL --token T`
// the bench is a client of that server (SSE over HTTP) and, for s1 and s2, a
// remote worker of it (StartRemoteWorker) that runs the emitting workflow.
// Their --store form measures a server the bench starts itself, the same way:
// s1 and s2 one in the bench's process (onLocalServer), s3 `trellis server` as
// a child process, so that its resident set is the server's alone.

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

// localServer is the --store form of the workloads that measure a server (s1,
// s2, ui1): a server in this process on o.Store, insecure, on a loopback port,
// measured through its HTTP API exactly as `--server URL` measures a server.
type localServer struct {
	st  store.Store
	srv *server.Server
}

func startLocalServer(ctx context.Context, storeURL string) (*localServer, error) {
	st, err := trellis.OpenStore(ctx, storeURL, time.Now) // creates and migrates the schema
	if err != nil {
		return nil, err
	}
	l := &localServer{st: st}
	l.srv, err = server.New(ctx, server.Config{Backend: st, Listen: "127.0.0.1:0", Insecure: true})
	if err == nil {
		err = l.srv.Start()
	}
	if err != nil {
		l.close()
		return nil, err
	}
	return l, nil
}

func (l *localServer) base() string { return "http://" + l.srv.Addr().String() }

func (l *localServer) close() {
	if l.srv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = l.srv.Shutdown(ctx)
	}
	l.st.Close()
}

// onLocalServer is the --store form of the remote workload name: it runs it,
// with its remote worker, through a server this process starts on o.Store.
func onLocalServer(name string) func(ctx context.Context, n int, o Options) (*Result, error) {
	return func(ctx context.Context, n int, o Options) (*Result, error) {
		w, _ := FindRemote(name)
		l, err := startLocalServer(ctx, o.Store)
		if err != nil {
			return nil, err
		}
		defer l.close()
		res, err := runRemote(ctx, w, n, RemoteOptions{Server: l.base(), Concurrency: o.Concurrency, Subscribers: o.Subscribers})
		if err != nil {
			return nil, err
		}
		if res.Settings == nil {
			res.Settings = map[string]any{}
		}
		res.Settings["via"] = "in-process server"
		return res, nil
	}
}

// runRemoteS1: one run emits n events, one every ~2 ms, run by the remote
// worker; an SSE client of the server reads them; the latency of each is from
// Emit (the worker's clock, in this process) to its arrival at the client.
func runRemoteS1(ctx context.Context, o RemoteOptions, n int) (*Result, error) {
	rc, err := openRemoteClient(ctx, o)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	h, err := trellis.Start(ctx, rc, emitter, emitIn{Events: n, Every: 1, Pause: 2 * time.Millisecond, Gate: true})
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
				if err := rc.SendEvent(ctx, h.RunID(), "go", ""); err != nil {
					return nil, err
				}
			}
		case "e":
			var em emitted
			if err := json.Unmarshal(ev.Data, &em); err != nil {
				return nil, err
			}
			lat = append(lat, now.Sub(time.Unix(0, em.At)))
		case "run.failed", "run.cancelled":
			return nil, fmt.Errorf("run %s: %s %s", h.RunID(), ev.Name, ev.Data)
		}
	}
	if len(lat) != n {
		return nil, fmt.Errorf("the client received %d of %d events", len(lat), n)
	}
	wall := time.Since(start)
	return &Result{WallS: wall.Seconds(), P50Ms: percentile(lat, 50), P99Ms: percentile(lat, 99)}, nil
}

// runRemoteS2: o.Subscribers SSE subscribers (default 1,000) of the server on
// one run, which the remote worker runs and which emits n events as fast as
// its checkpoints go (10 per checkpoint); every subscriber must get every event
// once, in order, or the workload fails. events_per_s is the events delivered
// (n × subscribers) per second, from the gate's opening to the last delivery.
func runRemoteS2(ctx context.Context, o RemoteOptions, n int) (*Result, error) {
	subs := o.Subscribers
	if subs <= 0 {
		subs = 1000
	}
	rc, err := openRemoteClient(ctx, o)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	h, err := trellis.Start(ctx, rc, emitter, emitIn{Events: n, Every: 10, Gate: true})
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
			waiting := sync.OnceFunc(ready.Done) // at run.waiting, or when it ends first
			defer waiting()
			next := 0
			for ev, err := range rc.Stream(ctx, h.RunID(), 0) {
				if err != nil {
					fail(fmt.Errorf("subscriber %d: %w", s, err))
					return
				}
				switch ev.Name {
				case "run.waiting":
					waiting()
				case "e":
					var em emitted
					if err := json.Unmarshal(ev.Data, &em); err != nil || em.I != next {
						fail(fmt.Errorf("subscriber %d: event %d out of order (want %d): %v", s, em.I, next, err))
						return
					}
					next++
					if next == n { // the window ends at the last event's delivery
						at := time.Now()
						mu.Lock()
						if at.After(lastAt) {
							lastAt = at
						}
						mu.Unlock()
					}
				}
			}
			if next != n {
				fail(fmt.Errorf("subscriber %d: got %d of %d events", s, next, n))
			}
		}()
	}
	ready.Wait()
	start := time.Now()
	if ctx.Err() == nil {
		if err := rc.SendEvent(ctx, h.RunID(), "go", ""); err != nil {
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

// idleWorkflow is the workflow of s3's run: no worker serves it, so the run
// stays pending and its streams silent.
const idleWorkflow = "bench-idle-nobody-serves"

// runRemoteS3: o.Subscribers idle SSE subscribers (default 10,000) on the
// server, each a raw connection whose stream is open and silent (a run that no
// worker serves, after=now). rss_per_subscriber_kb is the growth of the
// server's resident set per open stream, as the server itself reports it
// (process_resident_memory_bytes of its GET /metrics): read after one warm-up
// stream and half a second, then 2 s after the last stream opened.
func runRemoteS3(ctx context.Context, o RemoteOptions, _ int) (*Result, error) {
	subs := o.Subscribers
	if subs <= 0 {
		subs = 10000
	}
	if err := checkFileLimit(uint64(subs) + 256); err != nil {
		return nil, err
	}
	if _, err := serverMetrics(ctx, o); err != nil { // before anything opens
		return nil, err
	}
	c, err := openRemoteClient(ctx, o)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	run, err := c.StartRaw(ctx, idleWorkflow, []byte("null"), trellis.StartOptions{})
	if err != nil {
		return nil, err
	}
	u, _ := url.Parse(o.Server)
	req := "GET " + runsPath + "/" + run.ID + "/stream?after=now HTTP/1.1\r\nHost: " + u.Host + "\r\n"
	if o.Token != "" {
		req += "Authorization: Bearer " + o.Token + "\r\n"
	}
	req += "Accept: text/event-stream\r\n\r\n"
	// Warm the server's paths with one stream, then measure from there.
	warm, err := openRaw(u.Host, req)
	if err != nil {
		return nil, err
	}
	defer warm.Close()
	time.Sleep(500 * time.Millisecond)
	m, err := serverMetrics(ctx, o)
	if err != nil {
		return nil, err
	}
	before := m[rssMetric]
	start := time.Now()
	conns := make([]net.Conn, 0, subs)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range subs {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		conn, err := openRaw(u.Host, req)
		if err != nil {
			return nil, fmt.Errorf("opening stream %d: %w", len(conns)+1, err)
		}
		conns = append(conns, conn)
	}
	wall := time.Since(start)
	time.Sleep(2 * time.Second) // let the server settle
	if m, err = serverMetrics(ctx, o); err != nil {
		return nil, err
	}
	after, open := m[rssMetric], m[subscribersMetric]
	if open < float64(subs) {
		return nil, fmt.Errorf("the server counts %v open stream subscribers (%s), want at least %d", open, subscribersMetric, subs)
	}
	perSub := (after - before) / 1024 / float64(subs)
	res := &Result{WallS: wall.Seconds(), Subscribers: subs, RSSPerSubscriberKB: &perSub,
		RSSIdleMB: ptr(before / (1 << 20)), RSSWaitingMB: ptr(after / (1 << 20))}
	res.Settings = map[string]any{"rss_source": "GET /metrics " + rssMetric, "server_stream_subscribers": open}
	return res, nil
}

// The metrics the bench reads from the server's GET /metrics: s3's, and the
// server's CPU (w1 through a server).
const (
	rssMetric         = "process_resident_memory_bytes"
	subscribersMetric = "trellis_stream_subscribers"
	cpuMetric         = "process_cpu_seconds_total"
)

// serverMetrics reads the server's GET /metrics (Prometheus text format) and
// returns the values of s3's metrics.
func serverMetrics(ctx context.Context, o RemoteOptions) (map[string]float64, error) {
	out, err := readMetrics(ctx, o, rssMetric, subscribersMetric)
	if err != nil {
		return nil, fmt.Errorf("s3 reads the server's resident set from %w", err)
	}
	if _, ok := out[rssMetric]; !ok {
		return nil, fmt.Errorf("the server's GET /metrics has no %s (its process collector reads /proc: a server on Linux has it)", rssMetric)
	}
	return out, nil
}

// readMetrics reads the server's GET /metrics and returns the values of the
// named metrics (those without labels) that it holds.
func readMetrics(ctx context.Context, o RemoteOptions, names ...string) (map[string]float64, error) {
	req, err := http.NewRequestWithContext(ctx, "GET", strings.TrimSuffix(o.Server, "/")+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	if o.Token != "" {
		req.Header.Set("Authorization", "Bearer "+o.Token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return nil, fmt.Errorf("GET /metrics, which answered %s (%s): "+
			"give a token with reader on every namespace (reader:*, as the admin token has), or measure an --insecure server",
			resp.Status, problemDetail(b))
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), " ")
		if !ok || !slices.Contains(names, name) {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
		if err != nil {
			return nil, fmt.Errorf("GET /metrics: %s %q: %w", name, value, err)
		}
		out[name] = v
	}
	return out, sc.Err()
}

// serverCPU is the server process's CPU seconds so far, from its GET
// /metrics; ok is false when the token may not read them (or the server's
// platform does not report them).
func serverCPU(ctx context.Context, o RemoteOptions) (seconds float64, ok bool) {
	m, err := readMetrics(ctx, o, cpuMetric)
	if err != nil {
		return 0, false
	}
	seconds, ok = m[cpuMetric]
	return seconds, ok
}

// checkFileLimit makes sure this process may open need files. Go raised its
// soft limit (RLIMIT_NOFILE) to the hard one as it started; a hard limit
// under need is the user's to raise.
func checkFileLimit(need uint64) error {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return err
	}
	if l.Cur < need {
		return fmt.Errorf("this workload opens about %d connections, and this process may open only %d files (ulimit -Hn): raise the limit or pass fewer --subscribers", need, l.Cur)
	}
	return nil
}

// runS3 is the --store form of s3: it starts `trellis server --insecure` on
// o.Store as a child process, so that the resident set is the server's alone,
// and measures it as s3 measures a server given by --server.
func runS3(ctx context.Context, n int, o Options) (*Result, error) {
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
	w, _ := FindRemote("s3")
	res, err := runRemote(ctx, w, n, RemoteOptions{Server: base, Subscribers: o.Subscribers})
	if err != nil {
		return nil, err
	}
	res.Settings["via"] = "child trellis server" // runRemoteS3 made Settings
	return res, nil
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

func ptr(v float64) *float64 { return &v }
