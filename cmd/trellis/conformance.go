package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/trellis-dev/trellis/conformance"
)

const conformanceAbout = `Run the conformance kit (conformance/kit.json, docs/conformance.md) against a
Trellis server and an SDK's kit worker. The runner makes a fresh queue, starts
the worker command with "sh -c" in a process group of its own and the kit's
environment (TRELLIS_SERVER, TRELLIS_TOKEN, TRELLIS_NAMESPACE, TRELLIS_QUEUE,
TRELLIS_WORKER_NAME, TRELLIS_LEASE_SECONDS), waits for its worker record, starts
every case's run in that queue at once (the case that kills the worker last, on
its own), acts on the runs (events, an approval, a cancellation, a SIGKILL of the
worker's process group and a second start of the command), then checks each run's
end, history, children, stream and values. It prints a line per case, stops the
worker with SIGTERM and exits 0 when every case passed, 1 otherwise.

The token needs the roles worker, producer, reader and approver on the namespace
(on every queue of it: the queue is new). The worker's stdout and stderr go to a
file the output names, or to stderr with --verbose.`

// runConformance is `trellis conformance`.
func runConformance(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("conformance",
		"conformance --server URL --token T --worker-cmd 'CMD' [--namespace NS] [--only NAMES] [--timeout D] [--verbose]",
		conformanceAbout, stderr)
	var o confOptions
	fs.StringVar(&o.server, "server", "", "the Trellis server's `URL`, e.g. http://127.0.0.1:7070 (default $"+envServer+")")
	fs.StringVar(&o.token, "token", "", "the bearer `token` (default $"+envToken+")")
	fs.StringVar(&o.namespace, "namespace", "", "the `namespace` of the runs (default $"+envNamespace+", else \"default\")")
	fs.StringVar(&o.workerCmd, "worker-cmd", "", "the kit worker's command `line`, run with sh -c (required)")
	fs.StringVar(&o.only, "only", "", "run only these cases: comma-separated `names` (\"conformance.kv\" or \"kv\")")
	fs.DurationVar(&o.timeout, "timeout", 2*time.Minute, "give up on the cases still running after this `duration`")
	fs.BoolVar(&o.verbose, "verbose", false, "pass the worker's output on to stderr instead of a file")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef(fs, "conformance: unexpected argument %q", pos[0])
	}
	if o.server == "" {
		o.server = os.Getenv(envServer)
	}
	if o.token == "" {
		o.token = os.Getenv(envToken)
	}
	if o.namespace == "" {
		o.namespace = os.Getenv(envNamespace)
	}
	if o.namespace == "" {
		o.namespace = "default"
	}
	switch {
	case o.server == "":
		return usagef(fs, "conformance: --server is required, or set %s", envServer)
	case o.token == "":
		return usagef(fs, "conformance: --token is required, or set %s", envToken)
	case strings.TrimSpace(o.workerCmd) == "":
		return usagef(fs, "conformance: --worker-cmd is required")
	case o.timeout <= 0:
		return usagef(fs, "conformance: --timeout must be positive")
	}
	if u, err := url.Parse(o.server); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return usagef(fs, "conformance: --server %q is not an http(s) URL", o.server)
	}
	kit, err := conformance.Load()
	if err != nil {
		return err
	}
	cases := kit.Cases
	if o.only != "" {
		cases = nil
		for _, n := range strings.Split(o.only, ",") {
			n = strings.TrimSpace(n)
			c := kit.Case(n)
			if c == nil {
				c = kit.Case("conformance." + n)
			}
			if c == nil {
				return usagef(fs, "conformance: --only: no case %q (cases: %s)", n, strings.Join(kit.Names(), ", "))
			}
			if !slices.Contains(cases, c) {
				cases = append(cases, c)
			}
		}
	}
	r := &confRunner{confOptions: o, kit: kit, out: stdout, stderr: stderr,
		base: strings.TrimRight(o.server, "/"), hc: &http.Client{}}
	return r.run(ctx, cases)
}

type confOptions struct {
	server, token, namespace, workerCmd, only string
	timeout                                   time.Duration
	verbose                                   bool
}

// confRunner runs the kit's cases against one server and worker command.
type confRunner struct {
	confOptions
	kit    *conformance.Kit
	out    io.Writer
	stderr io.Writer
	base   string
	hc     *http.Client
	queue  string

	outMu sync.Mutex

	logPath string
	wlog    io.Writer

	// cancel ends the kit with a cause: the worker exited on its own.
	cancel context.CancelCauseFunc

	wmu    sync.Mutex
	worker *workerProc
	starts int
}

// workerProc is one start of the worker command.
type workerProc struct {
	cmd      *exec.Cmd
	name     string
	done     chan struct{} // closed when it has exited
	state    *os.ProcessState
	stopping atomic.Bool // the runner signals it: its exit is no failure
}

func (r *confRunner) printf(format string, args ...any) {
	r.outMu.Lock()
	defer r.outMu.Unlock()
	fmt.Fprintf(r.out, format, args...)
}

func (r *confRunner) run(ctx context.Context, cases []*conformance.Case) (err error) {
	began := time.Now()
	r.queue = "conformance-" + randomHex(4)
	r.printf("trellis conformance: %d cases on %s, namespace %q, queue %q\n", len(cases), r.base, r.namespace, r.queue)
	if err := r.checkToken(ctx); err != nil {
		return err
	}
	if r.verbose {
		r.wlog = r.stderr
	} else {
		f, err := os.CreateTemp("", "trellis-conformance-*.log")
		if err != nil {
			return err
		}
		defer f.Close()
		r.logPath, r.wlog = f.Name(), f
		r.printf("worker output: %s\n", f.Name())
	}

	kitCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	r.cancel = cancel
	kitCtx, cancelTimeout := context.WithTimeoutCause(kitCtx, r.timeout, fmt.Errorf("--timeout %s passed", r.timeout))
	defer cancelTimeout()

	t0 := time.Now()
	if err := r.startWorker(kitCtx); err != nil {
		r.stopWorker()
		return err
	}
	r.printf("worker %s up in %.1fs\n", r.worker.name, time.Since(t0).Seconds())

	// Every case at once, but those that kill the worker: they go last, one
	// at a time, so that no other run is caught by the kill.
	var first, last []*conformance.Case
	for _, c := range cases {
		if c.Kills() {
			last = append(last, c)
		} else {
			first = append(first, c)
		}
	}
	var failed []string
	var fmu sync.Mutex
	report := func(c *conformance.Case, d time.Duration, err error) {
		if err != nil {
			if cause := context.Cause(kitCtx); cause != nil && kitCtx.Err() != nil && !strings.Contains(err.Error(), cause.Error()) {
				err = fmt.Errorf("%w (%v)", err, cause)
			}
			fmu.Lock()
			failed = append(failed, c.Name)
			fmu.Unlock()
			r.printf("FAIL  %-28s %5.1fs  %v\n", c.Name, d.Seconds(), err)
			return
		}
		r.printf("PASS  %-28s %5.1fs\n", c.Name, d.Seconds())
	}
	var wg sync.WaitGroup
	for _, c := range first {
		wg.Go(func() {
			t := time.Now()
			err := r.runCase(kitCtx, c)
			report(c, time.Since(t), err)
		})
	}
	wg.Wait()
	for _, c := range last {
		t := time.Now()
		err := r.runCase(kitCtx, c)
		report(c, time.Since(t), err)
	}

	stopErr := r.stopWorker()
	if ctx.Err() != nil {
		return ctx.Err() // interrupted
	}
	total := time.Since(began).Seconds()
	if len(failed) > 0 {
		r.printf("FAIL: %d of %d cases failed in %.1fs: %s\n", len(failed), len(cases), total, strings.Join(failed, ", "))
		if r.logPath != "" {
			r.printf("worker output: %s\n", r.logPath)
		}
		return fmt.Errorf("conformance: %d of %d cases failed", len(failed), len(cases))
	}
	if stopErr != nil {
		r.printf("FAIL: every case passed, but %v\n", stopErr)
		return fmt.Errorf("conformance: %w", stopErr)
	}
	r.printf("PASS: %d of %d cases in %.1fs\n", len(cases), len(cases), total)
	return nil
}

// checkToken makes sure the token holds the four roles the kit needs, each
// with a request that changes nothing, and says which are missing.
func (r *confRunner) checkToken(ctx context.Context) error {
	probe := "conformance-probe-" + randomHex(4)
	ns := url.PathEscape(r.namespace)
	checks := []struct {
		role, method, path string
		body               any
		why                string
	}{
		{"reader", "GET", "/v1/namespaces/" + ns + "/workers", nil, "to read runs, histories and streams"},
		{"producer", "POST", "/v1/namespaces/" + ns + "/runs/" + probe + "/cancel", nil, "to start runs, send events and cancel"},
		{"approver", "POST", "/v1/namespaces/" + ns + "/approvals/" + probe + "/approve", struct{}{}, "to approve"},
		{"worker", "POST", "/trellis.worker.v1.WorkerService/ListWorkers", map[string]string{"namespace": r.namespace}, "for the kit worker"},
	}
	var missing []string
	for _, c := range checks {
		err := r.call(ctx, c.method, c.path, c.body, nil)
		var ae *apiError
		switch {
		case err == nil, errors.As(err, &ae) && ae.status == http.StatusNotFound:
		case errors.As(err, &ae) && ae.status == http.StatusUnauthorized:
			return fmt.Errorf("conformance: the server does not accept the token: %v", err)
		case errors.As(err, &ae) && ae.status == http.StatusForbidden:
			missing = append(missing, fmt.Sprintf("%s (%s)", c.role, c.why))
		default:
			return fmt.Errorf("conformance: checking the token's %s role: %w", c.role, err)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("conformance: the token lacks, on namespace %q: %s; grant them with trellis tokens create --grant ROLE:%s",
			r.namespace, strings.Join(missing, ", "), r.namespace)
	}
	return nil
}

// startWorker starts the worker command and waits for its live worker record.
func (r *confRunner) startWorker(ctx context.Context) error {
	r.wmu.Lock()
	r.starts++
	name := fmt.Sprintf("%s-w%d", r.queue, r.starts)
	cmd := exec.Command("sh", "-c", r.workerCmd)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Env = append(os.Environ(),
		"TRELLIS_SERVER="+r.base, "TRELLIS_TOKEN="+r.token, "TRELLIS_NAMESPACE="+r.namespace,
		"TRELLIS_QUEUE="+r.queue, "TRELLIS_WORKER_NAME="+name,
		"TRELLIS_LEASE_SECONDS="+strconv.Itoa(r.kit.LeaseSeconds))
	cmd.Stdout, cmd.Stderr = r.wlog, r.wlog
	if err := cmd.Start(); err != nil {
		r.wmu.Unlock()
		return fmt.Errorf("conformance: starting the worker command: %w", err)
	}
	p := &workerProc{cmd: cmd, name: name, done: make(chan struct{})}
	r.worker = p
	r.wmu.Unlock()
	go func() {
		_ = cmd.Wait()
		p.state = cmd.ProcessState
		close(p.done)
		if !p.stopping.Load() {
			r.cancel(fmt.Errorf("the worker command exited on its own (%s)%s", p.state, r.seeLog()))
		}
	}()

	deadline := time.NewTimer(30 * time.Second)
	defer deadline.Stop()
	for {
		var ws struct {
			Workers []struct {
				Name string `json:"name"`
				Live bool   `json:"live"`
			} `json:"workers"`
		}
		err := r.call(ctx, "GET", "/v1/namespaces/"+url.PathEscape(r.namespace)+"/workers", nil, &ws)
		if err == nil && slices.ContainsFunc(ws.Workers, func(w struct {
			Name string `json:"name"`
			Live bool   `json:"live"`
		}) bool {
			return w.Name == name && w.Live
		}) {
			return nil
		}
		exited := func() error {
			return fmt.Errorf("conformance: the worker command exited (%s) before its worker record %q appeared%s", p.state, name, r.seeLog())
		}
		select {
		case <-p.done:
			return exited()
		case <-deadline.C:
			return fmt.Errorf("conformance: no live worker record %q within 30s of starting the worker command (last read: %v)%s", name, err, r.seeLog())
		case <-ctx.Done():
			select {
			case <-p.done: // its exit ended ctx
				return exited()
			default:
			}
			return fmt.Errorf("conformance: waiting for worker record %q: %w", name, context.Cause(ctx))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (r *confRunner) seeLog() string {
	if r.logPath == "" {
		return ""
	}
	return "; its output is in " + r.logPath
}

// killWorker SIGKILLs the worker's process group and waits for it to exit.
func (r *confRunner) killWorker() time.Time {
	r.wmu.Lock()
	p := r.worker
	r.wmu.Unlock()
	p.stopping.Store(true)
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	at := time.Now()
	<-p.done
	return at
}

// stopWorker SIGTERMs the worker's process group and waits for it to exit:
// 20 s, then SIGKILL. It reports a worker that did not stop in time.
func (r *confRunner) stopWorker() error {
	r.wmu.Lock()
	p := r.worker
	r.wmu.Unlock()
	if p == nil {
		return nil
	}
	p.stopping.Store(true)
	select {
	case <-p.done:
		return nil // exited already: reported where it was seen
	default:
	}
	t := time.Now()
	pgid := p.cmd.Process.Pid
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	// The shell may not exec the command: wait for the whole group to go.
	deadline := time.After(20 * time.Second)
	for wait := p.done; ; {
		select {
		case <-wait:
			wait = nil
		case <-deadline:
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
			<-p.done
			return fmt.Errorf("the worker did not stop within 20s of SIGTERM (killed)")
		case <-time.After(20 * time.Millisecond):
		}
		if wait == nil && !groupAlive(pgid) {
			r.printf("worker %s stopped on SIGTERM in %.1fs\n", p.name, time.Since(t).Seconds())
			return nil
		}
	}
}

// groupAlive reports whether a process of the group lives. On Linux it reads
// /proc, where an exited member that its new parent (init, after the shell
// went) has not reaped yet is a zombie and counts as gone; elsewhere it asks
// kill(2), which counts zombies.
func groupAlive(pgid int) bool {
	if errors.Is(syscall.Kill(-pgid, 0), syscall.ESRCH) {
		return false
	}
	stats, err := filepath.Glob("/proc/[0-9]*/stat")
	if err != nil || len(stats) == 0 {
		return true
	}
	for _, f := range stats {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		// pid (comm) state ppid pgrp ...: comm may hold spaces and parentheses.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		fields := strings.Fields(string(b[i+1:]))
		if len(fields) >= 3 && fields[2] == strconv.Itoa(pgid) && fields[0] != "Z" && fields[0] != "X" {
			return true
		}
	}
	return false
}

// runCase starts the case's run, acts on it, waits for its end and checks it.
func (r *confRunner) runCase(ctx context.Context, c *conformance.Case) error {
	if err := context.Cause(ctx); err != nil {
		return fmt.Errorf("not started: %w", err)
	}
	var run conformance.Run
	body := map[string]any{"workflow": c.Name, "id": r.queue + "." + strings.TrimPrefix(c.Name, "conformance."),
		"queue": r.queue, "input": c.Input}
	if err := r.call(ctx, "POST", r.nsPath("/runs"), body, &run); err != nil {
		return fmt.Errorf("starting the run: %w", err)
	}
	defer func() {
		if run.Final() {
			return
		}
		// Leave nothing behind: a run that failed its case or stays blocked.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = r.call(cctx, "POST", r.runPath(run.ID, "/cancel"), nil, nil)
	}()
	var facts conformance.Facts
	for _, a := range c.Actions {
		if err := r.act(ctx, &run, a, &facts); err != nil {
			return err
		}
	}
	if err := r.waitEnd(ctx, &run, c.Expect.Status); err != nil {
		return err
	}
	var h conformance.History
	if err := r.call(ctx, "GET", r.runPath(run.ID, "/history"), nil, &h); err != nil {
		return fmt.Errorf("reading the history: %w", err)
	}
	return c.Verify(ctx, &h, r, facts)
}

func (r *confRunner) act(ctx context.Context, run *conformance.Run, a conformance.Action, f *conformance.Facts) error {
	switch a.Do {
	case conformance.DoSendEvent:
		if err := r.waitStatus(ctx, run, "waiting", "sending event "+a.Event); err != nil {
			return err
		}
		if err := r.call(ctx, "POST", r.runPath(run.ID, "/events"), map[string]any{"name": a.Event, "payload": a.Payload}, nil); err != nil {
			return fmt.Errorf("sending event %s: %w", a.Event, err)
		}
	case conformance.DoCancel:
		if err := r.waitStatus(ctx, run, "waiting", "cancelling"); err != nil {
			return err
		}
		if err := r.call(ctx, "POST", r.runPath(run.ID, "/cancel"), nil, nil); err != nil {
			return fmt.Errorf("cancelling: %w", err)
		}
	case conformance.DoApprove:
		id, err := r.waitApproval(ctx, run, a.Approval)
		if err != nil {
			return err
		}
		if err := r.call(ctx, "POST", r.nsPath("/approvals/"+url.PathEscape(id)+"/approve"), map[string]string{"comment": "trellis conformance"}, nil); err != nil {
			return fmt.Errorf("approving %s: %w", a.Approval, err)
		}
	case conformance.DoKillWorker:
		if err := r.waitStepDone(ctx, run, a.AfterStep); err != nil {
			return err
		}
		select {
		case <-time.After(time.Duration(a.DelayMS) * time.Millisecond):
		case <-ctx.Done():
			return context.Cause(ctx)
		}
		f.KilledAt = r.killWorker()
		if err := r.startWorker(ctx); err != nil {
			return fmt.Errorf("after the kill: %w", err)
		}
	default:
		return fmt.Errorf("unknown action %q", a.Do)
	}
	return nil
}

// poll calls fn every interval until it reports done, an error, or ctx ends
// (then what names what was awaited).
func poll(ctx context.Context, interval time.Duration, what string, fn func() (bool, error)) error {
	for {
		done, err := fn()
		if done || err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("gave up waiting %s: %v", what, context.Cause(ctx))
		case <-time.After(interval):
		}
	}
}

// waitStatus waits for the run to be in status; a run that ends first fails.
func (r *confRunner) waitStatus(ctx context.Context, run *conformance.Run, status, before string) error {
	return poll(ctx, 50*time.Millisecond, fmt.Sprintf("for the run to be %s before %s", status, before), func() (bool, error) {
		if err := r.getRun(ctx, run); err != nil {
			return false, err
		}
		switch {
		case run.Status == status:
			return true, nil
		case run.Final() || run.Status == "blocked":
			return false, fmt.Errorf("the run is %s%s, want it %s before %s", run.Status, errText(run), status, before)
		}
		return false, nil
	})
}

// waitEnd waits for the run to end, or to reach the expected status.
func (r *confRunner) waitEnd(ctx context.Context, run *conformance.Run, want string) error {
	return poll(ctx, 100*time.Millisecond, "for the run to end", func() (bool, error) {
		if err := r.getRun(ctx, run); err != nil {
			return false, err
		}
		return run.Final() || run.Status == want, nil
	})
}

func (r *confRunner) waitApproval(ctx context.Context, run *conformance.Run, name string) (string, error) {
	var id string
	err := poll(ctx, 50*time.Millisecond, fmt.Sprintf("for approval request %q", name), func() (bool, error) {
		var l struct {
			Approvals []struct {
				ID     string `json:"id"`
				Name   string `json:"name"`
				Status string `json:"status"`
			} `json:"approvals"`
		}
		if err := r.call(ctx, "GET", r.nsPath("/approvals?run="+url.QueryEscape(run.ID)), nil, &l); err != nil {
			return false, fmt.Errorf("listing approvals: %w", err)
		}
		for _, a := range l.Approvals {
			if a.Name == name && a.Status == "pending" {
				id = a.ID
				return true, nil
			}
		}
		if err := r.getRun(ctx, run); err == nil && (run.Final() || run.Status == "blocked") {
			return false, fmt.Errorf("the run is %s%s, with no approval request %q", run.Status, errText(run), name)
		}
		return false, nil
	})
	return id, err
}

func (r *confRunner) waitStepDone(ctx context.Context, run *conformance.Run, step string) error {
	return poll(ctx, 20*time.Millisecond, fmt.Sprintf("for step %q", step), func() (bool, error) {
		var h conformance.History
		if err := r.call(ctx, "GET", r.runPath(run.ID, "/history"), nil, &h); err != nil {
			return false, fmt.Errorf("reading the history: %w", err)
		}
		if slices.ContainsFunc(h.Ops, func(o conformance.Op) bool { return o.Kind == "step" && o.Name == step && o.Done }) {
			return true, nil
		}
		if h.Run.Final() || h.Run.Status == "blocked" {
			return false, fmt.Errorf("the run is %s%s before step %q was recorded", h.Run.Status, errText(&h.Run), step)
		}
		return false, nil
	})
}

// getRun reads the run again.
func (r *confRunner) getRun(ctx context.Context, run *conformance.Run) error {
	var cur conformance.Run
	if err := r.call(ctx, "GET", r.runPath(run.ID, ""), nil, &cur); err != nil {
		return fmt.Errorf("reading the run: %w", err)
	}
	*run = cur
	return nil
}

func errText(run *conformance.Run) string {
	if run.Error == nil {
		return ""
	}
	return fmt.Sprintf(" (%s: %s)", run.Error.Type, run.Error.Message)
}

// Children implements conformance.Source.
func (r *confRunner) Children(ctx context.Context, runID string, position int) ([]conformance.Run, error) {
	var l struct {
		Runs []conformance.Run `json:"runs"`
	}
	err := r.call(ctx, "GET", r.runPath(runID, "/children?position="+strconv.Itoa(position)), nil, &l)
	return l.Runs, err
}

// Value implements conformance.Source.
func (r *confRunner) Value(ctx context.Context, runID, key string) (json.RawMessage, bool, error) {
	var v struct {
		Value json.RawMessage `json:"value"`
	}
	err := r.call(ctx, "GET", r.runPath(runID, "/values/"+url.PathEscape(key)), nil, &v)
	var ae *apiError
	if errors.As(err, &ae) && ae.status == http.StatusNotFound {
		return nil, false, nil
	}
	return v.Value, err == nil, err
}

// Stream implements conformance.Source: it reads the run's server-sent events
// until the server ends the stream after the run's final event.
func (r *confRunner) Stream(ctx context.Context, runID string) ([]conformance.StreamEvent, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", r.base+r.runPath(runID, "/stream"), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+r.token)
	req.Header.Set("Accept", "text/event-stream")
	resp, err := r.hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, readAPIError(req, resp)
	}
	var evs []conformance.StreamEvent
	var cur conformance.StreamEvent
	var data []string
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		line := sc.Text()
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch {
		case line == "":
			if cur.Event != "" || len(data) > 0 {
				cur.Data = json.RawMessage(strings.Join(data, "\n"))
				evs = append(evs, cur)
			}
			cur, data = conformance.StreamEvent{}, nil
		case field == "id":
			cur.Seq, _ = strconv.ParseInt(value, 10, 64)
		case field == "event":
			cur.Event = value
		case field == "data":
			data = append(data, value)
		}
	}
	if err := sc.Err(); err != nil {
		return evs, fmt.Errorf("reading the stream (it did not end within 10s?): %w", err)
	}
	return evs, nil
}

func (r *confRunner) nsPath(tail string) string {
	return "/v1/namespaces/" + url.PathEscape(r.namespace) + tail
}

func (r *confRunner) runPath(id, tail string) string {
	return r.nsPath("/runs/" + url.PathEscape(id) + tail)
}

// apiError is an answer of the server other than 2xx.
type apiError struct {
	status int
	what   string // method and path
	code   string
	detail string
}

func (e *apiError) Error() string {
	return fmt.Sprintf("%s: %d %s: %s", e.what, e.status, e.code, e.detail)
}

func readAPIError(req *http.Request, resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	var p struct {
		Code    string `json:"code"`
		Detail  string `json:"detail"`
		Message string `json:"message"` // Connect's errors
	}
	e := &apiError{status: resp.StatusCode, what: req.Method + " " + req.URL.Path}
	if json.Unmarshal(b, &p) == nil && (p.Code != "" || p.Detail != "" || p.Message != "") {
		e.code, e.detail = p.Code, p.Detail
		if e.detail == "" {
			e.detail = p.Message
		}
	} else {
		e.detail = strings.TrimSpace(string(b))
	}
	return e
}

// call sends a request with the token and decodes a 2xx answer's JSON into
// out. 429 and 503 answers are retried for a few seconds.
func (r *confRunner) call(ctx context.Context, method, path string, body, out any) error {
	var payload []byte
	if body != nil {
		var err error
		if payload, err = json.Marshal(body); err != nil {
			return err
		}
	}
	for try := 0; ; try++ {
		req, err := http.NewRequestWithContext(ctx, method, r.base+path, bytes.NewReader(payload))
		if err != nil {
			return err
		}
		req.Header.Set("Authorization", "Bearer "+r.token)
		if body != nil {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := r.hc.Do(req)
		if err != nil {
			if ctx.Err() != nil {
				return context.Cause(ctx)
			}
			return err
		}
		if (resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable) && try < 20 {
			resp.Body.Close()
			select {
			case <-ctx.Done():
				return context.Cause(ctx)
			case <-time.After(200 * time.Millisecond):
			}
			continue
		}
		defer resp.Body.Close()
		if resp.StatusCode/100 != 2 {
			return readAPIError(req, resp)
		}
		if out == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			return nil
		}
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			return fmt.Errorf("%s %s: decoding the answer: %w", method, path, err)
		}
		return nil
	}
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
