package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/trellis-dev/trellis"
	"github.com/trellis-dev/trellis/server"
	"github.com/trellis-dev/trellis/store/storesqlite"
	"go.opentelemetry.io/otel/trace"
)

const (
	devPollInterval = 100 * time.Millisecond
	// devTimeout bounds the demo, which normally takes about 4s.
	devTimeout = time.Minute
)

// runDev is the newcomer's tour: it runs the example workflows of demo.go on a local
// SQLite store with an embedded worker, prints each change of a run's status, and
// ends with where the data is and what to try next.
func runDev(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("dev", "dev [--store URL] [--ui ADDR|off]",
		"Run example workflows on a local store with an embedded worker, and watch their runs\nstart, step, wait on a retry, succeed and fail. Traces are exported over OTLP as the\nOTEL_* variables say, as for trellis server (docs/observability.md).", stderr)
	var raw, uiAddr string
	var accessLog bool
	fs.StringVar(&raw, "store", "", "store `URL` (default sqlite://<absolute path of ./trellis.db>)")
	fs.StringVar(&uiAddr, "ui", devUIAddr, "serve the web UI on this loopback `address` (without authentication) until interrupted; \"off\": run the demo and exit")
	fs.BoolVar(&accessLog, "access-log", false, "write the UI server's access log (a line per request) on stderr")
	pos, err := parseArgs(fs, args)
	switch {
	case err != nil:
		return err
	case len(pos) > 0:
		return usagef(fs, "dev: unexpected argument %q", pos[0])
	}
	storeURL, dbPath, err := devStore(raw)
	if err != nil {
		return usagef(fs, "dev: %v", err)
	}
	// One set of metrics for the demo's worker and the UI's server, so that the
	// server's /metrics shows the demo runs' attempts and steps.
	metrics := trellis.NewMetrics()
	// Tracing is on when the standard OTEL_* variables say so, as for trellis
	// server: the demo's runs and steps, and the UI's requests, become spans.
	tp, stopTracing, err := tracingFromEnv(ctx)
	if err != nil {
		return fmt.Errorf("dev: %w", err)
	}
	defer stopTracing()
	c, err := trellis.Open(ctx, trellis.Config{Store: storeURL, Metrics: metrics, TracerProvider: tp, Worker: trellis.WorkerOptions{
		PollInterval: 200 * time.Millisecond, ShutdownGrace: time.Second,
	}})
	if err != nil {
		return err
	}
	var srv *server.Server
	if uiAddr != "off" {
		logger, closeLog := serverLogger(stderr, accessLog)
		defer closeLog() // after the server's Shutdown below
		if srv, err = devUI(ctx, storeURL, uiAddr, logger, metrics, tp, stdout); err != nil {
			return errors.Join(err, c.Close())
		}
	}
	err = dev(ctx, c, storeURL, dbPath, stdout)
	if srv != nil {
		if err == nil {
			fmt.Fprintf(stdout, "\nThe web UI stays up at http://%s/ ; press Ctrl-C to stop.\n", srv.Addr())
			<-ctx.Done()
		}
		sctx, cancel := context.WithTimeout(context.Background(), serverShutdownGrace)
		defer cancel()
		err = errors.Join(err, srv.Shutdown(sctx))
	}
	return errors.Join(err, c.Close())
}

// devUIAddr is where trellis dev serves the web UI by default.
const devUIAddr = "127.0.0.1:7070"

// devUI serves the web UI (and the API and metrics) on the dev store without
// authentication, on a loopback address only; when the default port is taken,
// on another one.
//
// Its access log is off unless logger takes Info (--access-log): the UI's
// pages poll every second or two, and the demo writes its tour to the same
// terminal.
func devUI(ctx context.Context, storeURL, addr string, logger *slog.Logger, metrics *trellis.Metrics, tp trace.TracerProvider, stdout io.Writer) (*server.Server, error) {
	start := func(addr string) (*server.Server, error) {
		srv, err := server.New(ctx, server.Config{Store: storeURL, Listen: addr, Insecure: true, Metrics: metrics,
			TracerProvider: tp, Logger: logger, DisableAccessLog: !logger.Enabled(ctx, slog.LevelInfo)})
		if err != nil {
			return nil, err
		}
		if err := srv.Start(); err != nil {
			return nil, errors.Join(err, srv.Shutdown(context.Background()))
		}
		return srv, nil
	}
	srv, err := start(addr)
	if err != nil && addr == devUIAddr {
		srv, err = start("127.0.0.1:0")
	}
	if err != nil {
		return nil, fmt.Errorf("dev: serving the web UI: %w", err)
	}
	fmt.Fprintf(stdout, "trellis dev: web UI at http://%s/ (no sign-in: loopback only)\n", srv.Addr())
	return srv, nil
}

func dev(ctx context.Context, c *trellis.Client, storeURL, dbPath string, w io.Writer) error {
	if err := c.Register(ctx, demoWorkflows()...); err != nil {
		return err
	}
	fmt.Fprintf(w, "trellis dev: running example workflows on %s\n\n", dbPath)
	began := time.Now()
	runs, err := startDemoRuns(ctx, c, strconv.FormatInt(began.UnixMilli(), 36))
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeoutCause(ctx, devTimeout,
		fmt.Errorf("the demo runs did not finish within %s (see: trellis runs list --store %s)", devTimeout, storeURL))
	defer cancel()
	final, err := watchRuns(ctx, c, runs, began, w)
	if err != nil {
		return err
	}
	printDevSummary(w, storeURL, dbPath, final, time.Since(began))
	return nil
}

// devStore returns the store URL dev uses, with an absolute path so that the
// commands it suggests work from any directory, and the database file's path.
func devStore(raw string) (storeURL, dbPath string, err error) {
	if raw == "" {
		raw = "sqlite:trellis.db"
	}
	if !strings.HasPrefix(raw, "sqlite:") {
		return raw, "", nil
	}
	cfg, err := storesqlite.ParseURL(raw)
	if err != nil {
		return "", "", err
	}
	if dbPath, err = filepath.Abs(cfg.Path); err != nil {
		return "", "", err
	}
	u, err := url.Parse(raw)
	if err != nil {
		return "", "", err
	}
	return (&url.URL{Scheme: "sqlite", Path: dbPath, RawQuery: u.RawQuery}).String(), dbPath, nil
}

// watcher prints a line each time one of the demo's runs changes status.
type watcher struct {
	c                *trellis.Client
	runs             []demoRun
	since            time.Time
	w                io.Writer
	nameWidth, idLen int
	seen             map[string]*trellis.Run // by run ID: the last state printed
}

// watchRuns polls the runs until all have finished and returns their final state.
// (Polling is fine for a UI; Client.Wait is push-based for one run.)
func watchRuns(ctx context.Context, c *trellis.Client, runs []demoRun, since time.Time, w io.Writer) ([]*trellis.Run, error) {
	wt := &watcher{c: c, runs: runs, since: since.Add(-time.Minute), w: w, seen: make(map[string]*trellis.Run)}
	for _, r := range runs {
		wt.nameWidth, wt.idLen = max(wt.nameWidth, len(r.Workflow)), max(wt.idLen, len(r.WorkflowID))
	}
	for _, r := range runs { // Start returned once each run was durable, as pending
		wt.observe(&trellis.Run{ID: r.RunID, Workflow: r.Workflow, WorkflowID: r.WorkflowID, Status: trellis.StatusPending})
	}
	tick := time.NewTicker(devPollInterval)
	defer tick.Stop()
	for {
		done, err := wt.poll(ctx)
		if err != nil || done {
			return wt.final(), err
		}
		select {
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return nil, context.Cause(ctx) // devTimeout's explanation
			}
			return nil, ctx.Err()
		case <-tick.C:
		}
	}
}

// poll lists recent runs, prints the changes, and reports whether all finished.
func (wt *watcher) poll(ctx context.Context) (bool, error) {
	page, err := wt.c.List(ctx, trellis.ListOptions{CreatedAfter: wt.since, Limit: 1000})
	if err != nil {
		return false, err
	}
	byID := make(map[string]*trellis.Run, len(page.Runs))
	for _, r := range page.Runs {
		byID[r.ID] = r
	}
	done := true
	for _, d := range wt.runs {
		r := byID[d.RunID]
		if r == nil { // not on the page of a busy shared store: ask for it directly
			if r, err = wt.c.Get(ctx, d.RunID); err != nil {
				return false, err
			}
		}
		wt.observe(r)
		done = done && r.Status.Terminal()
	}
	return done, nil
}

func (wt *watcher) observe(r *trellis.Run) {
	prev := wt.seen[r.ID]
	if prev != nil && prev.Status == r.Status && prev.WaitReason == r.WaitReason {
		return
	}
	wt.seen[r.ID] = r
	from := ""
	if prev != nil {
		from = string(prev.Status) + " "
	}
	line := fmt.Sprintf("%s  %-*s  %-*s  %s→ %s", time.Now().Format("15:04:05.000"),
		wt.nameWidth, r.Workflow, wt.idLen, r.WorkflowID, from, r.Status)
	if d := statusDetail(r); d != "" {
		line += " (" + d + ")"
	}
	fmt.Fprintln(wt.w, line)
}

func (wt *watcher) final() []*trellis.Run {
	out := make([]*trellis.Run, 0, len(wt.runs))
	for _, d := range wt.runs {
		if r := wt.seen[d.RunID]; r != nil {
			out = append(out, r)
		}
	}
	return out
}

// statusDetail explains a status: why a run waits, its error, or its output.
func statusDetail(r *trellis.Run) string {
	switch {
	case r.Status == trellis.StatusSucceeded:
		return "output: " + oneLine(payloadText(r.Output), 60)
	case r.WaitReason != "":
		return r.WaitReason
	case r.Error != nil:
		return "error: " + oneLine(r.Error.Message, 160)
	}
	return ""
}

func printDevSummary(w io.Writer, storeURL, dbPath string, runs []*trellis.Run, took time.Duration) {
	fmt.Fprintf(w, "\nAll %d demo runs finished in %.1fs: %s.\n\n", len(runs), took.Seconds(), countStatuses(runs))
	if dbPath != "" {
		fmt.Fprintf(w, "The runs, their history and their stored values live in %s.\n", dbPath)
	}
	fmt.Fprintln(w, "Next, try:")
	const cmd = "  go run ./cmd/trellis"
	fmt.Fprintf(w, "%s runs list --store %s\n", cmd, storeURL)
	if r := findRun(runs, chargeOrderWorkflow.Name()); r != nil {
		fmt.Fprintf(w, "%s runs history %s --store %s\n", cmd, r.WorkflowID, storeURL)
	}
	if r := findRun(runs, syncInventoryWorkflow.Name()); r != nil {
		fmt.Fprintf(w, "%s runs get %s --store %s\n", cmd, r.WorkflowID, storeURL)
	}
	fmt.Fprintf(w, "%s runs list --status failed --store %s\n", cmd, storeURL)
	fmt.Fprintln(w, "The example workflows are in cmd/trellis/demo.go.")
}

// countStatuses summarizes runs as e.g. "3 succeeded, 1 failed".
func countStatuses(runs []*trellis.Run) string {
	var parts []string
	for _, s := range allStatuses {
		n := 0
		for _, r := range runs {
			if r.Status == s {
				n++
			}
		}
		if n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, s))
		}
	}
	return strings.Join(parts, ", ")
}

func findRun(runs []*trellis.Run, workflow string) *trellis.Run {
	for _, r := range runs {
		if r.Workflow == workflow {
			return r
		}
	}
	return nil
}
