package trellis_test

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/trellis-dev/trellis"
	"github.com/trellis-dev/trellis/internal/auth"
	"github.com/trellis-dev/trellis/server"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// A run started by a Go client of a server, in a trace, and executed by a
// remote worker: the traceparent travels client → server → store → worker.
// When the server does not trace, the run's span is a child of the client's
// call span; when it does, of the server's own trellis.Start span, in the
// server span of the request, itself the client span's child. The run's step
// spans are its children.
func TestTracesThroughServer(t *testing.T) {
	t.Parallel()
	for _, serverTraces := range []bool{false, true} {
		t.Run(map[bool]string{false: "server not tracing", true: "server tracing"}[serverTraces], func(t *testing.T) {
			t.Parallel()
			tracesThroughServer(t, serverTraces)
		})
	}
}

func tracesThroughServer(t *testing.T, serverTraces bool) {
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	s := newWorkerServerWith(t, sqliteURL(t), func(c *server.Config) {
		if serverTraces {
			c.TracerProvider = tp
		}
	})
	wtok := s.token(t, "w", auth.Grant{Role: auth.RoleWorker, Namespace: "default"})
	ptok := s.token(t, "p", auth.Grant{Role: auth.RoleProducer, Namespace: "default"}, auth.Grant{Role: auth.RoleReader, Namespace: "default"})
	wf := trellis.NewWorkflow("remote-traced", func(wc *trellis.Context, in int) (int, error) {
		return trellis.Step(wc, "double", func(ctx context.Context) (int, error) { return 2 * in, nil })
	})
	wcfg := trellis.Config{Server: s.base, Token: wtok, TracerProvider: tp}
	wcfg.Worker.LeaseDuration = 2 * time.Second
	startRemoteWorkerWith(t, wcfg, wf)
	c, err := trellis.Open(ctxT(t), trellis.Config{Server: s.base, Token: ptok, TracerProvider: tp})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, root := tp.Tracer("test").Start(ctxT(t), "request")
	h := must[*trellis.Handle[int]](t)(trellis.Start(ctx, c, wf, 21))
	root.End()
	if got := mustResult(t, h); got != 42 {
		t.Fatalf("result %d", got)
	}
	waitFor(t, func() bool {
		return len(spansNamed(sr, "run remote-traced")) == 1 && len(spansNamed(sr, "step double")) == 1
	})
	byID := map[trace.SpanID]sdktrace.ReadOnlySpan{}
	for _, sp := range sr.Ended() {
		byID[sp.SpanContext().SpanID()] = sp
	}
	var clientStart sdktrace.ReadOnlySpan
	for _, sp := range spansNamed(sr, "trellis.Start") {
		if sp.Parent().SpanID() == root.SpanContext().SpanID() {
			clientStart = sp
		}
	}
	if clientStart == nil {
		t.Fatal("no trellis.Start span is a child of the request span")
	}
	run := spansNamed(sr, "run remote-traced")[0]
	if run.SpanContext().TraceID() != root.SpanContext().TraceID() || !run.Parent().IsRemote() {
		t.Fatalf("run span in trace %s (parent remote: %v), want the request's trace %s, its parent from the stored traceparent",
			run.SpanContext().TraceID(), run.Parent().IsRemote(), root.SpanContext().TraceID())
	}
	// The run span's ancestors up to the client's span, by name.
	var chain []string
	parent := run.Parent().SpanID()
	for parent != clientStart.SpanContext().SpanID() {
		sp, ok := byID[parent]
		if !ok {
			t.Fatalf("the run span's ancestors %v do not reach the client's trellis.Start span", chain)
		}
		chain = append(chain, fmt.Sprintf("%s (%s)", sp.Name(), sp.SpanKind()))
		parent = sp.Parent().SpanID()
	}
	want := []string{} // the client's span is the run's parent
	if serverTraces {
		want = []string{"trellis.Start (producer)", "startRun (server)"}
	}
	if !slices.Equal(chain, want) {
		t.Errorf("spans between the run span and the client's trellis.Start span: %q, want %q", chain, want)
	}
	step := spansNamed(sr, "step double")[0]
	if step.Parent().SpanID() != run.SpanContext().SpanID() {
		t.Errorf("step span's parent %s, want the run span %s", step.Parent().SpanID(), run.SpanContext().SpanID())
	}
}

const (
	envTraceCrashStore  = "TRELLIS_TRACE_CRASH_STORE"
	envTraceCrashMarker = "TRELLIS_TRACE_CRASH_MARKER"
	envTraceCrashHang   = "TRELLIS_TRACE_CRASH_HANG"
)

// traceCrashWorkflow has a step "first", then a step "second" that, in a
// process told to hang, creates marker and waits to be killed.
func traceCrashWorkflow(marker string, hang bool) *trellis.Workflow[int, int] {
	return trellis.NewWorkflow("trace-crash", func(wc *trellis.Context, in int) (int, error) {
		a, err := trellis.Step(wc, "first", func(ctx context.Context) (int, error) { return in, nil })
		if err != nil {
			return 0, err
		}
		return trellis.Step(wc, "second", func(ctx context.Context) (int, error) {
			if hang {
				if err := os.WriteFile(marker, nil, 0o644); err != nil {
					return 0, err
				}
				<-ctx.Done() // SIGKILL comes first
				return 0, ctx.Err()
			}
			return 2 * a, nil
		})
	})
}

// TestTraceCrashWorkerProcess is the worker process of
// TestTracesJoinAfterSIGKILL: a worker that traces as the OTEL_* variables
// say (TracerFromEnv), until SIGKILL, or SIGTERM, on which it stops and
// flushes its spans.
func TestTraceCrashWorkerProcess(t *testing.T) {
	url := os.Getenv(envTraceCrashStore)
	if url == "" {
		t.Skip("runs only as the worker process of TestTracesJoinAfterSIGKILL")
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	tp, shutdown, err := trellis.TracerFromEnv(ctx)
	if err != nil || tp == nil {
		t.Fatalf("TracerFromEnv: %v, %v", tp, err)
	}
	cfg := trellis.Config{Store: url, TracerProvider: tp}
	cfg.Worker.LeaseDuration = time.Second
	cfg.Worker.PollInterval = 50 * time.Millisecond
	cfg.Worker.ShutdownGrace = time.Second
	c, err := trellis.Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Register(context.Background(), traceCrashWorkflow(os.Getenv(envTraceCrashMarker), os.Getenv(envTraceCrashHang) != "")); err != nil {
		t.Fatal(err)
	}
	<-ctx.Done()
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := shutdown(sctx); err != nil {
		t.Fatalf("flushing spans: %v", err)
	}
	// The exporter keeps its idle connection to the receiver in the parent
	// process open, which the leak check of TestMain would report: the
	// process ends here, its work done, as a worker process does at exit.
	os.Exit(0)
}

// A run's spans join the trace of the call that started it after a real crash:
// the worker process executing it is SIGKILLed mid-step, another worker
// process replays and finishes it, and exports over OTLP/HTTP (TracerFromEnv)
// to a receiver in the test, whose decoded spans show the second attempt's run
// span as a child of the starting call's span, in its trace.
func TestTracesJoinAfterSIGKILL(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test skipped in -short mode")
	}
	t.Parallel()
	recv, endpoint := newOTLPHTTPReceiver(t)
	dir := t.TempDir()
	url, marker := "sqlite://"+filepath.Join(dir, "trace-crash.db"), filepath.Join(dir, "in-second-step")
	env := []string{envTraceCrashStore + "=" + url, envTraceCrashMarker + "=" + marker,
		"OTEL_EXPORTER_OTLP_ENDPOINT=" + endpoint, "OTEL_TRACES_EXPORTER=", "OTEL_EXPORTER_OTLP_PROTOCOL=",
		"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=", "OTEL_SDK_DISABLED=",
		"OTEL_TRACES_SAMPLER=", "OTEL_SERVICE_NAME=trace-crash-worker"}
	first := startTestProcess(t, "TestTraceCrashWorkerProcess", append(env, envTraceCrashHang+"=1")...)
	defer first.kill(t)

	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	starter := open(t, url, func(c *trellis.Config) { c.Worker.Disabled = true; c.TracerProvider = tp })
	ctx, root := tp.Tracer("test").Start(ctxT(t), "request")
	h := must[*trellis.Handle[int]](t)(trellis.Start(ctx, starter, traceCrashWorkflow("", false), 21))
	root.End()
	deadline := time.Now().Add(30 * time.Second)
	for _, err := os.Stat(marker); err != nil; _, err = os.Stat(marker) {
		if time.Now().After(deadline) {
			t.Fatal("the first worker process never reached the second step")
		}
		time.Sleep(10 * time.Millisecond)
	}
	first.kill(t) // mid-step: its run span never ends, nothing is saved of the step

	second := startTestProcess(t, "TestTraceCrashWorkerProcess", env...)
	defer second.kill(t)
	run := must[*trellis.Run](t)(starter.Wait(ctxT(t), h.RunID()))
	if run.Status != trellis.StatusSucceeded || string(run.Output) != "42" || run.Attempts != 2 {
		t.Fatalf("run %s, output %s, %d claims; want succeeded with 42 after 2 claims", run.Status, run.Output, run.Attempts)
	}
	second.terminate(t) // flushes its spans

	starts := spansNamed(sr, "trellis.Start")
	if len(starts) != 1 {
		t.Fatalf("%d trellis.Start spans, want 1", len(starts))
	}
	start := starts[0].SpanContext()
	var attempt2 *receivedSpan
	for _, s := range recv.named("run trace-crash") {
		if s.attr("trellis.run_id") == h.RunID() && s.attr("trellis.attempt") == "2" {
			attempt2 = s
		}
	}
	if attempt2 == nil {
		t.Fatalf("the receiver got no span of the run's second attempt (%d run spans)", len(recv.named("run trace-crash")))
	}
	if attempt2.Service != "trace-crash-worker" || attempt2.attr("trellis.status") != "succeeded" {
		t.Errorf("second attempt's span: service %q, status %q", attempt2.Service, attempt2.attr("trellis.status"))
	}
	if attempt2.traceID() != start.TraceID().String() || attempt2.parentID() != start.SpanID().String() {
		t.Fatalf("second attempt's run span: trace %s parent %s, want trace %s parent %s (the trellis.Start span)",
			attempt2.traceID(), attempt2.parentID(), start.TraceID(), start.SpanID())
	}
	var stepOfIt bool
	for _, s := range recv.named("step second") {
		if s.parentID() == attempt2.spanID() && s.traceID() == attempt2.traceID() {
			stepOfIt = true
		}
	}
	if !stepOfIt {
		t.Error("no span of step second is a child of the second attempt's run span")
	}
}
