package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/trellis-dev/trellis"
	_ "github.com/trellis-dev/trellis/store/storeremote" // the remote worker's transport
)

// Workloads through a server (`trellis bench --server URL`): the bench process
// is a client of the server's HTTP API, as a program in any language would be,
// and workflow code runs in a remote worker (StartRemoteWorker), never in the
// server.

// RemoteOptions configure a workload through a server.
type RemoteOptions struct {
	// Server is the server's base URL, e.g. http://127.0.0.1:7070.
	Server string
	// Token is the bearer token: producer and reader on namespace
	// RemoteNamespace, and worker for the workloads that need a remote worker;
	// s3 reads the server's GET /metrics, which needs reader on every namespace.
	// Empty for an insecure server.
	Token string
	// Clients is the number of keep-alive HTTP clients (connections) calling
	// at once; 0 means the workload's default.
	Clients int
	// Concurrency is the remote worker's slots (Config.Worker.Concurrency); 0
	// means the SDK's default.
	Concurrency int
	// Subscribers is the SSE subscribers of s2 and s3 (0: their default).
	Subscribers int
	// NoWorker starts no remote worker: another process's worker (an SDK's
	// bench worker, in any language) serves the bench workflows.
	NoWorker bool
}

// RemoteNamespace is the namespace the remote workloads start their runs in.
const RemoteNamespace = "bench"

// RemoteWorker starts a worker that serves the bench workflows (Workflows) for
// the server at o.Server, authenticating with o.Token, with o.Concurrency
// slots, and returns a function that
// stops it. A workload that needs workflow code to run (w3 over HTTP) calls it
// before its first start.
type RemoteWorker func(ctx context.Context, o RemoteOptions, wfs []trellis.Registrable) (stop func() error, err error)

// StartRemoteWorker is the hook that starts remote workers; by default a
// remote worker of the SDK in the bench process (trellis.NewWorker with
// Config.Server): workflow code runs here, and everything it stores goes
// through the server's worker protocol. Set to nil, the workloads that need a
// worker fail with ErrNoRemoteWorker; api-start needs none.
var StartRemoteWorker RemoteWorker = startRemoteWorker

// startRemoteWorker is the default StartRemoteWorker. The token needs the role
// worker on RemoteNamespace as well.
func startRemoteWorker(ctx context.Context, o RemoteOptions, wfs []trellis.Registrable) (func() error, error) {
	cfg := trellis.Config{Server: o.Server, Token: o.Token, Namespace: RemoteNamespace}
	cfg.Worker.Concurrency = o.Concurrency
	w, err := trellis.NewWorker(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if err := w.Register(ctx, wfs...); err != nil {
		w.Client().Close()
		return nil, err
	}
	return w.Client().Close, nil
}

// ErrNoRemoteWorker: a workload through a server needs a remote worker and
// StartRemoteWorker is not set.
var ErrNoRemoteWorker = errors.New("this workload needs a remote worker, and bench.StartRemoteWorker is nil")

// Workflows are the workflows of the bench, for a remote worker to register.
func Workflows() []trellis.Registrable { return benchWorkflows }

// RemoteWorkload is a workload through a server.
type RemoteWorkload struct {
	Name        string
	DefaultN    int
	Description string
	// DefaultClients is the default of RemoteOptions.Clients; 1 means the
	// workload is sequential and always uses one connection; 0 means n (w1:
	// every run started at once, as embedded w1 starts them).
	DefaultClients int
	// NeedsWorker says whether the workload needs StartRemoteWorker.
	NeedsWorker bool
	run         func(ctx context.Context, o RemoteOptions, n int) (*Result, error)
}

// RemoteWorkloads lists the workloads through a server, in order.
var RemoteWorkloads = []RemoteWorkload{
	{"api-start", 20000, "POST /runs of N runs from concurrent keep-alive clients (default 64), each durable before its 201; starts/s and per-request latency",
		64, false, runAPIStart},
	{"w1", 2000, "N workflows of 3 no-op steps started at once through the Go client over HTTP (as embedded w1: each from its own goroutine; --clients caps the starters), each waited for with Result from as many more; a remote worker runs them; wall time first start to last result",
		0, true, runRemoteW1},
	{"w2", 20, "one 20-step workflow N times in a row, started and waited for through the Go client over HTTP, run by a remote worker; per-step latency",
		1, true, runRemoteW2},
	{"w3", 200, "N sequential POST /runs then GET result?wait of a 1-step workflow run by a remote worker; latency",
		1, true, runRemoteW3},
	{"s1", 500, "one run emits N events ~2ms apart (a remote worker runs it); an SSE client of the server's stream route reads them; Emit to arrival latency",
		1, true, runRemoteS1},
	{"s2", 200, "one run emits N events (a remote worker runs it) to --subscribers SSE subscribers (default 1000) of the server; events delivered per second, each checked at each subscriber",
		1, true, runRemoteS2},
	{"s3", 0, "--subscribers idle SSE streams (default 10000) on the server; its resident set growth per stream, read from its GET /metrics (the token needs reader:*)",
		1, false, runRemoteS3},
	{"ui1", 1_000_000, "the web UI's runs page, signed in with the token, once namespace bench holds N seeded runs (pending, started through POST runs:batch, seeded once); page load latency",
		1, false, runRemoteUI1},
}

// RemoteNames lists the names of the workloads through a server, comma-separated.
func RemoteNames() string {
	names := make([]string, len(RemoteWorkloads))
	for i, w := range RemoteWorkloads {
		names[i] = w.Name
	}
	return strings.Join(names, ", ")
}

// FindRemote returns the remote workload named name.
func FindRemote(name string) (RemoteWorkload, bool) {
	for _, w := range RemoteWorkloads {
		if w.Name == name {
			return w, true
		}
	}
	return RemoteWorkload{}, false
}

// RunRemote runs workload w through the server of o with n runs (0: its default).
func RunRemote(ctx context.Context, w RemoteWorkload, n int, o RemoteOptions) (*Result, error) {
	if n <= 0 {
		n = w.DefaultN
	}
	if o.Clients <= 0 || w.DefaultClients == 1 {
		o.Clients = w.DefaultClients // a sequential workload uses one connection
	}
	if o.Clients <= 0 {
		o.Clients = n
	}
	u, err := url.Parse(o.Server)
	if err != nil || u.Scheme != "http" || u.Host == "" {
		return nil, fmt.Errorf("bench: server URL %q: want http://host:port", o.Server)
	}
	if err := checkToken(ctx, o); err != nil {
		return nil, fmt.Errorf("workload %s: %w", w.Name, err)
	}
	res, err := runRemote(ctx, w, n, o)
	if err != nil {
		return nil, fmt.Errorf("workload %s: %w", w.Name, err)
	}
	res.Workload, res.N = w.Name, n
	extra := res.Settings // what the workload measured besides the fixed fields
	res.Settings = map[string]any{"via": "server", "server": o.Server, "clients": o.Clients,
		"concurrency": o.Concurrency,
		"gomaxprocs":  runtime.GOMAXPROCS(0), "go": runtime.Version()}
	maps.Copy(res.Settings, extra)
	return res, nil
}

// checkToken asks the server for one run of RemoteNamespace, so that a server
// that is not there or a token it refuses fails every workload alike, before
// anything starts.
func checkToken(ctx context.Context, o RemoteOptions) error {
	c, err := dial(ctx, o)
	if err != nil {
		return fmt.Errorf("connecting to the server: %w", err)
	}
	defer c.close()
	defer context.AfterFunc(ctx, c.close)()
	status, b, err := c.do("GET", runsPath+"?limit=1", nil)
	switch {
	case err != nil:
		return fmt.Errorf("GET %s: %w", runsPath, err)
	case status == http.StatusUnauthorized:
		return fmt.Errorf("the server refused the token (401: %s): give --token a token it knows", problemDetail(b))
	case status == http.StatusForbidden:
		return fmt.Errorf("the token may not read namespace %s (403: %s): it needs producer, reader and worker on it", RemoteNamespace, problemDetail(b))
	case status != http.StatusOK:
		return fmt.Errorf("GET %s: %d %s", runsPath, status, problemDetail(b))
	}
	return nil
}

// problemDetail is the detail of a problem answer of the API (RFC 9457), or
// the body itself when it is not one.
func problemDetail(b []byte) string {
	var p struct {
		Detail string `json:"detail"`
	}
	if json.Unmarshal(b, &p) == nil && p.Detail != "" {
		return p.Detail
	}
	return string(bytes.TrimSpace(b))
}

// runRemote runs workload w with n runs through the server of o, with the
// remote worker it needs, and returns what it measured.
func runRemote(ctx context.Context, w RemoteWorkload, n int, o RemoteOptions) (*Result, error) {
	if w.NeedsWorker && !o.NoWorker {
		if StartRemoteWorker == nil {
			return nil, ErrNoRemoteWorker
		}
		stop, err := StartRemoteWorker(ctx, o, Workflows())
		if err != nil {
			return nil, fmt.Errorf("starting the remote worker: %w", err)
		}
		defer stop()
	}
	return w.run(ctx, o, n)
}

// conn is one keep-alive HTTP/1.1 connection to the server, used by one
// goroutine at a time: a request is written whole, its response read whole,
// before the next. It is the least a client can spend per request, so that the
// bench, sharing the machine with the server, measures the server.
type conn struct {
	c     net.Conn
	r     *bufio.Reader
	host  string
	token string
	buf   bytes.Buffer
}

func dial(ctx context.Context, o RemoteOptions) (*conn, error) {
	u, _ := url.Parse(o.Server)
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", u.Host)
	if err != nil {
		return nil, err
	}
	return &conn{c: c, r: bufio.NewReaderSize(c, 16<<10), host: u.Host, token: o.Token}, nil
}

func (c *conn) close() { c.c.Close() }

// do sends one request and returns the response's status and body. A
// mutating request carries a fresh Idempotency-Key, as every client of the
// SDK sends one (and a server may require it: trellis server
// --require-idempotency-key); time-ordered, as the Go client's (httpc).
func (c *conn) do(method, path string, body []byte) (int, []byte, error) {
	c.buf.Reset()
	fmt.Fprintf(&c.buf, "%s %s HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nAccept: application/json\r\n", method, path, c.host, c.token)
	if method != http.MethodGet {
		fmt.Fprintf(&c.buf, "Idempotency-Key: %s\r\n", uuid.Must(uuid.NewV7()))
	}
	if body != nil {
		c.buf.WriteString("Content-Type: application/json\r\nContent-Length: ")
		c.buf.WriteString(strconv.Itoa(len(body)))
		c.buf.WriteString("\r\n\r\n")
		c.buf.Write(body)
	} else {
		c.buf.WriteString("\r\n")
	}
	if _, err := c.c.Write(c.buf.Bytes()); err != nil {
		return 0, nil, err
	}
	return c.readResponse()
}

// readResponse reads one HTTP/1.1 response: its status line, the headers it
// needs (Content-Length, Transfer-Encoding, Connection) and its body. It parses
// no more than that, so that a client costs the machine little.
func (c *conn) readResponse() (int, []byte, error) {
	line, err := c.r.ReadSlice('\n')
	if err != nil {
		return 0, nil, err
	}
	// "HTTP/1.1 201 Created\r\n"
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.")) {
		return 0, nil, fmt.Errorf("malformed status line %q", line)
	}
	status, err := strconv.Atoi(string(line[9:12]))
	if err != nil {
		return 0, nil, fmt.Errorf("malformed status line %q", line)
	}
	length, chunked, closing := -1, false, false
	for {
		line, err := c.r.ReadSlice('\n')
		if err != nil {
			return 0, nil, err
		}
		line = bytes.TrimRight(line, "\r\n")
		if len(line) == 0 {
			break
		}
		name, value, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			return 0, nil, fmt.Errorf("malformed header %q", line)
		}
		value = bytes.TrimSpace(value)
		switch {
		case bytes.EqualFold(name, []byte("Content-Length")):
			if length, err = strconv.Atoi(string(value)); err != nil || length < 0 {
				return 0, nil, fmt.Errorf("malformed Content-Length %q", value)
			}
		case bytes.EqualFold(name, []byte("Transfer-Encoding")):
			chunked = bytes.EqualFold(value, []byte("chunked"))
		case bytes.EqualFold(name, []byte("Connection")):
			closing = bytes.EqualFold(value, []byte("close"))
		}
	}
	var b []byte
	switch {
	case chunked:
		b, err = io.ReadAll(httputil.NewChunkedReader(c.r))
		if err == nil {
			_, err = c.r.Discard(2) // the CRLF after the last chunk
		}
	case length >= 0:
		b = make([]byte, length)
		_, err = io.ReadFull(c.r, b)
	case status == http.StatusNoContent || status == http.StatusNotModified:
	default:
		return 0, nil, errors.New("a response without Content-Length on a keep-alive connection")
	}
	if err != nil {
		return 0, nil, err
	}
	if closing {
		return status, b, errors.New("the server closed the connection")
	}
	return status, b, nil
}

// runsPath is the path of the runs of RemoteNamespace.
const runsPath = "/v1/namespaces/" + RemoteNamespace + "/runs"

// apiStartWorkflow is the workflow api-start starts: no worker serves it, so its
// runs stay pending; the workload measures the start path alone.
const apiStartWorkflow = "bench-api-start"

// runAPIStart starts n runs from o.Clients connections, each POST answered 201
// only once its run is durable, and reports starts/s (WorkflowsPerS) and the
// latency of one POST.
func runAPIStart(ctx context.Context, o RemoteOptions, n int) (*Result, error) {
	conns := make([]*conn, o.Clients)
	defer func() {
		for _, c := range conns {
			if c != nil {
				c.close()
			}
		}
	}()
	for i := range conns {
		c, err := dial(ctx, o)
		if err != nil {
			return nil, err
		}
		conns[i] = c
		// One request first, so that the measurement has warm connections and a
		// principal the server has cached.
		if status, b, err := c.do("GET", runsPath+"?limit=1", nil); err != nil || status != 200 {
			return nil, fmt.Errorf("GET %s: %d %s %v", runsPath, status, bytes.TrimSpace(b), err)
		}
	}
	// Closing the connections unblocks the clients when ctx ends.
	defer context.AfterFunc(ctx, func() {
		for _, c := range conns {
			c.close()
		}
	})()
	prefix := fmt.Sprintf(`{"workflow":%q,"input":`, apiStartWorkflow)
	var next atomic.Int64
	lat := make([]time.Duration, n)
	errs := make(chan error, len(conns))
	var wg sync.WaitGroup
	begin := time.Now()
	for _, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body := make([]byte, 0, 64)
			for ctx.Err() == nil {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				body = strconv.AppendInt(append(body[:0], prefix...), int64(i), 10)
				body = append(body, '}')
				t0 := time.Now()
				status, b, err := c.do("POST", runsPath, body)
				lat[i] = time.Since(t0)
				if err == nil && status != http.StatusCreated {
					err = fmt.Errorf("POST %s: %d %s", runsPath, status, bytes.TrimSpace(b))
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	wall := time.Since(begin)
	close(errs)
	if err := errors.Join(collect(errs)...); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return &Result{WallS: wall.Seconds(), WorkflowsPerS: float64(n) / wall.Seconds(),
		P50Ms: percentile(lat, 50), P99Ms: percentile(lat, 99)}, nil
}

// runRemoteW3 runs n one-step workflows one after the other through the API:
// POST /runs, then GET result?wait until the run has ended.
func runRemoteW3(ctx context.Context, o RemoteOptions, n int) (*Result, error) {
	c, err := dial(ctx, o)
	if err != nil {
		return nil, err
	}
	defer c.close()
	defer context.AfterFunc(ctx, c.close)()
	lat := make([]time.Duration, 0, n)
	begin := time.Now()
	for i := range n {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		t0 := time.Now()
		status, b, err := c.do("POST", runsPath, fmt.Appendf(nil, `{"workflow":%q,"input":%d}`, oneStep.Name(), i))
		if err == nil && status != http.StatusCreated {
			err = fmt.Errorf("POST %s: %d %s", runsPath, status, bytes.TrimSpace(b))
		}
		if err != nil {
			return nil, err
		}
		var run trellis.Run
		if err := json.Unmarshal(b, &run); err != nil {
			return nil, err
		}
		for !run.Status.Terminal() {
			status, b, err = c.do("GET", runsPath+"/"+url.PathEscape(run.ID)+"/result?wait=30s", nil)
			if err == nil && status != http.StatusOK && status != http.StatusAccepted {
				err = fmt.Errorf("GET result: %d %s", status, bytes.TrimSpace(b))
			}
			if err != nil {
				return nil, err
			}
			if err := json.Unmarshal(b, &run); err != nil {
				return nil, err
			}
		}
		if run.Status != trellis.StatusSucceeded {
			return nil, fmt.Errorf("run %s ended %s", run.ID, run.Status)
		}
		lat = append(lat, time.Since(t0))
	}
	wall := time.Since(begin)
	return &Result{WallS: wall.Seconds(), WorkflowsPerS: float64(n) / wall.Seconds(), StepsPerS: float64(n) / wall.Seconds(),
		P50Ms: percentile(lat, 50), P99Ms: percentile(lat, 99)}, nil
}

// openRemoteClient opens a Go client (trellis.Open with Config.Server) on the
// server of o: every call it makes is a call of the HTTP API.
func openRemoteClient(ctx context.Context, o RemoteOptions) (*trellis.Client, error) {
	return trellis.Open(ctx, trellis.Config{Server: o.Server, Token: o.Token, Namespace: RemoteNamespace})
}

// runRemoteW1 is w1 through a server: n three-step runs started with the Go
// client over HTTP by o.Clients starters (by default n: every run at once, as
// embedded w1 starts them), each run's handle passed to one of o.Clients
// waiters that block in Result until it ended. The client gathers concurrent
// starts into runs:batch requests and waits into runs:wait long polls, so n
// callers hold a few connections, not n. The remote worker (its slots fewer
// than n at the default n of a sustained run) executes them.
func runRemoteW1(ctx context.Context, o RemoteOptions, n int) (*Result, error) {
	c, err := openRemoteClient(ctx, o)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type started struct {
		h  *trellis.Handle[string]
		i  int
		t0 time.Time
	}
	handles := make(chan started, n)
	lat := make([]time.Duration, n)
	errs := make(chan error, 2*o.Clients)
	fail := func(err error) {
		errs <- err
		cancel()
	}
	var next atomic.Int64
	var starters, waiters sync.WaitGroup
	srvCPU0, srvOK := serverCPU(ctx, o)
	begin, cpu0 := time.Now(), processCPU()
	for range o.Clients {
		starters.Add(1)
		go func() {
			defer starters.Done()
			for ctx.Err() == nil {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				t0 := time.Now()
				h, err := trellis.Start(ctx, c, threeSteps, i)
				if err != nil {
					fail(err)
					return
				}
				handles <- started{h, i, t0}
			}
		}()
		waiters.Add(1)
		go func() {
			defer waiters.Done()
			for s := range handles {
				if _, err := s.h.Result(ctx); err != nil {
					fail(err)
					return
				}
				lat[s.i] = time.Since(s.t0)
			}
		}()
	}
	starters.Wait()
	close(handles)
	waiters.Wait()
	wall, cpu := time.Since(begin), processCPU()-cpu0
	close(errs)
	if err := errors.Join(collect(errs)...); err != nil {
		return nil, err
	}
	res := &Result{
		WallS: wall.Seconds(), WorkflowsPerS: float64(n) / wall.Seconds(), StepsPerS: float64(3*n) / wall.Seconds(),
		P50Ms: percentile(lat, 50), P99Ms: percentile(lat, 99),
		CPUMsPerRun: perRunMs(cpu, n),
	}
	if srvCPU1, ok := serverCPU(ctx, o); srvOK && ok {
		res.ServerCPUMsPerRun = ptr((srvCPU1 - srvCPU0) * 1000 / float64(n))
	}
	return res, nil
}

// runRemoteW2 is w2 through a server: the Go client over HTTP starts each
// 20-step run and waits for it; the remote worker, in this process, records
// when each step started (stepTimes), so the per-step interval is measured
// where the steps run.
func runRemoteW2(ctx context.Context, o RemoteOptions, n int) (*Result, error) {
	c, err := openRemoteClient(ctx, o)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return runW2(ctx, c, n)
}
