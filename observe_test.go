package trellis_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/trellis-dev/trellis"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

type tenantKey struct{}

// recorder is a user interceptor that logs what it wraps, and carries a tenant
// from each run attempt to the steps of the attempt.
type recorder struct {
	mu    sync.Mutex
	lines []string
}

func (r *recorder) add(s string) {
	r.mu.Lock()
	r.lines = append(r.lines, s)
	r.mu.Unlock()
}

func (r *recorder) has(s string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Contains(r.lines, s)
}

func (r *recorder) interceptor(name string) trellis.Interceptor {
	return trellis.Interceptor{
		Workflow: func(ctx context.Context, a *trellis.WorkflowAttempt, next func(context.Context)) {
			r.add(fmt.Sprintf("%s workflow %s attempt %d before", name, a.Workflow, a.Attempt))
			next(context.WithValue(ctx, tenantKey{}, "acme"))
			r.add(fmt.Sprintf("%s workflow %s after %s", name, a.Workflow, a.Status))
		},
		Step: func(ctx context.Context, s *trellis.StepCall, next func(context.Context) error) error {
			r.add(fmt.Sprintf("%s step %s/%s attempt %d before", name, s.Workflow, s.Step, s.Attempt))
			err := next(ctx)
			r.add(fmt.Sprintf("%s step %s after err=%v", name, s.Step, err))
			return err
		},
		Call: func(ctx context.Context, c *trellis.ClientCall, next func(context.Context) error) error {
			r.add(fmt.Sprintf("%s call %s %s before", name, c.Method, c.Workflow))
			err := next(ctx)
			r.add(fmt.Sprintf("%s call %s after", name, c.Method))
			return err
		},
	}
}

// Interceptors wrap run attempts, step attempts and client calls, the first
// outermost; a value an interceptor puts in a run attempt's context reaches the
// attempt's steps.
func TestInterceptorsOrderAndTenant(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	wf := trellis.NewWorkflow("icpt", func(wc *trellis.Context, in int) (string, error) {
		return trellis.Step(wc, "tenant", func(ctx context.Context) (string, error) {
			v, _ := ctx.Value(tenantKey{}).(string)
			return v, nil
		})
	})
	c := open(t, storeURL(t), func(cfg *trellis.Config) {
		cfg.Interceptors = []trellis.Interceptor{rec.interceptor("a"), rec.interceptor("b")}
	})
	register(t, c, wf)
	h := must[*trellis.Handle[string]](t)(trellis.Start(ctxT(t), c, wf, 1))
	if got := mustResult(t, h); got != "acme" {
		t.Fatalf("the step saw tenant %q, want %q from the workflow interceptor", got, "acme")
	}
	if _, err := c.Get(ctxT(t), h.RunID()); err != nil {
		t.Fatal(err)
	}
	// The run's end is reported to Result before the interceptors return.
	deadline := time.Now().Add(5 * time.Second)
	for !rec.has("a workflow icpt after succeeded") && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	want := []string{
		"a call Register  before", "b call Register  before", "b call Register after", "a call Register after",
		"a call Start icpt before", "b call Start icpt before", "b call Start after", "a call Start after",
		"a workflow icpt attempt 1 before", "b workflow icpt attempt 1 before",
		"a step icpt/tenant attempt 1 before", "b step icpt/tenant attempt 1 before",
		"b step tenant after err=<nil>", "a step tenant after err=<nil>",
		"b workflow icpt after succeeded", "a workflow icpt after succeeded",
		"a call Result  before", "b call Result  before", "b call Result after", "a call Result after",
		"a call Get  before", "b call Get  before", "b call Get after", "a call Get after",
	}
	// Calls and the run interleave; the order within each kind is what counts.
	for _, kind := range []string{" call ", " workflow ", " step "} {
		var got, exp []string
		for _, l := range rec.lines {
			if strings.Contains(l, kind) {
				got = append(got, l)
			}
		}
		for _, l := range want {
			if strings.Contains(l, kind) {
				exp = append(exp, l)
			}
		}
		if !slices.Equal(got, exp) {
			t.Errorf("%s lines:\n got %q\nwant %q", kind, got, exp)
		}
	}
}

// An interceptor may fail a step attempt; the step is retried as for any error.
func TestInterceptorFailsStepAttempt(t *testing.T) {
	t.Parallel()
	var n atomic.Int32
	wf := trellis.NewWorkflow("icpt-fail", func(wc *trellis.Context, in int) (int, error) {
		return trellis.Step(wc, "s", func(ctx context.Context) (int, error) { return in + 1, nil })
	})
	c := open(t, storeURL(t), func(cfg *trellis.Config) {
		cfg.Interceptors = []trellis.Interceptor{{Step: func(ctx context.Context, s *trellis.StepCall, next func(context.Context) error) error {
			if n.Add(1) == 1 {
				return errors.New("refused by interceptor")
			}
			return next(ctx)
		}}}
	})
	register(t, c, wf)
	h := must[*trellis.Handle[int]](t)(trellis.Start(ctxT(t), c, wf, 1))
	if got := mustResult(t, h); got != 2 || n.Load() != 2 {
		t.Fatalf("result %d after %d attempts, want 2 after 2", got, n.Load())
	}
}

// Metrics scraped after a few runs count them: runs started and ended, step
// attempts by outcome, commits, claims, and the scrape-time gauges.
func TestMetricsCountRuns(t *testing.T) {
	t.Parallel()
	m := trellis.NewMetrics()
	var fails atomic.Int32
	wf := trellis.NewWorkflow("metered", func(wc *trellis.Context, in int) (int, error) {
		a, err := trellis.Step(wc, "one", func(ctx context.Context) (int, error) { return in, nil })
		if err != nil {
			return 0, err
		}
		return trellis.Step(wc, "two", func(ctx context.Context) (int, error) {
			if in == 0 && fails.Add(1) == 1 {
				return 0, errors.New("flaky")
			}
			return a + 1, nil
		})
	})
	c := open(t, storeURL(t), func(cfg *trellis.Config) { cfg.Metrics = m })
	register(t, c, wf)
	for i := range 3 {
		h := must[*trellis.Handle[int]](t)(trellis.Start(ctxT(t), c, wf, i))
		mustResult(t, h)
	}
	waitFor(t, func() bool {
		return strings.Contains(scrape(t, m), `trellis_runs_ended_total{status="succeeded",workflow="metered"} 3`)
	})
	text := scrape(t, m)
	for _, want := range []string{
		`trellis_runs_started_total{workflow="metered"} 3`,
		`trellis_runs_ended_total{status="succeeded",workflow="metered"} 3`,
		`trellis_run_attempts_total{status="succeeded",workflow="metered"} 3`,
		`trellis_step_attempts_total{outcome="ok",workflow="metered"} 6`,
		`trellis_step_attempts_total{outcome="error",workflow="metered"} 1`,
		`trellis_step_attempt_duration_seconds_count{workflow="metered"} 7`,
		`trellis_active_leases 0`,
		`trellis_workers_connected{namespace="default"} 1`,
		`trellis_stream_subscribers 0`,
	} {
		if !strings.Contains(text, want+"\n") {
			t.Errorf("metrics lack %q", want)
		}
	}
	if v := metricValue(text, "trellis_claim_seconds_count"); v < 1 {
		t.Errorf("trellis_claim_seconds_count = %v, want at least 1 (the worker claimed the runs)", v)
	}
	for _, name := range []string{"trellis_store_commit_batch_size_count", "trellis_store_commit_seconds_count"} {
		if v := metricValue(text, name); v < 3 {
			t.Errorf("%s = %v, want at least 3 (a commit per run at least)", name, v)
		}
	}
	if strings.Contains(text, `trellis_runs{`) {
		t.Errorf("no run is unfinished, yet trellis_runs reports some:\n%s", text)
	}
}

// trellis_runs counts the unfinished runs by queue and status at scrape time.
func TestMetricsRunsGauge(t *testing.T) {
	t.Parallel()
	m := trellis.NewMetrics()
	wf := trellis.NewWorkflow("gauged", func(wc *trellis.Context, in int) (int, error) { return in, nil })
	c := open(t, storeURL(t), func(cfg *trellis.Config) { cfg.Metrics = m; cfg.Worker.Disabled = true })
	register(t, c, wf)
	for i := range 2 {
		must[*trellis.Handle[int]](t)(trellis.Start(ctxT(t), c, wf, i, trellis.StartOptions{Queue: "q1"}))
	}
	if text := scrape(t, m); !strings.Contains(text, `trellis_runs{namespace="default",queue="q1",status="pending"} 2`+"\n") {
		t.Fatalf("trellis_runs lacks the 2 pending runs of q1:\n%s", grepLines(text, "trellis_runs"))
	}
}

// Clients that share their metrics and a database (a worker and a server in one
// process, say) report its runs and workers once; those of two databases are
// added up. A gauge reported twice would fail the whole scrape.
func TestMetricsRunsGaugeOfSharedMetrics(t *testing.T) {
	t.Parallel()
	m := trellis.NewMetrics()
	one, other := sqliteURL(t), sqliteURL(t)
	a := open(t, one, func(cfg *trellis.Config) { cfg.Metrics = m; cfg.Worker.Disabled = true })
	open(t, one, func(cfg *trellis.Config) { cfg.Metrics = m; cfg.Worker.Disabled = true })
	b := open(t, other, func(cfg *trellis.Config) { cfg.Metrics = m; cfg.Worker.Disabled = true })
	for _, c := range []*trellis.Client{a, b} {
		if _, err := c.StartRaw(ctxT(t), "nobody-serves", nil, trellis.StartOptions{Queue: "q1"}); err != nil {
			t.Fatal(err)
		}
	}
	if text := scrape(t, m); !strings.Contains(text, `trellis_runs{namespace="default",queue="q1",status="pending"} 2`+"\n") {
		t.Fatalf("trellis_runs lacks the 2 pending runs of q1, one per database:\n%s", grepLines(text, "trellis_runs"))
	}
	// A worker on each database, the first beside two clients of its database.
	wf := trellis.NewWorkflow("served", func(wc *trellis.Context, in int) (int, error) { return in, nil })
	for _, url := range []string{one, other} {
		register(t, open(t, url, func(cfg *trellis.Config) { cfg.Metrics = m }), wf)
	}
	waitFor(t, func() bool {
		return strings.Contains(scrape(t, m), `trellis_workers_connected{namespace="default"} 2`+"\n")
	})
}

// Each run attempt and step attempt is a span; run attempts are children of the
// span of the call that started the run, also when the run is handed back by a
// client that closes mid-run and replayed by another client.
func TestTracesJoinTheStartingTraceAcrossReplay(t *testing.T) {
	t.Parallel()
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	var closing atomic.Bool
	started := make(chan struct{}, 1)
	wf := trellis.NewWorkflow("traced", func(wc *trellis.Context, in int) (int, error) {
		a, err := trellis.Step(wc, "first", func(ctx context.Context) (int, error) { return in, nil })
		if err != nil {
			return 0, err
		}
		return trellis.Step(wc, "second", func(ctx context.Context) (int, error) {
			if !closing.Load() {
				started <- struct{}{}
				<-ctx.Done() // until the first client closes
				return 0, ctx.Err()
			}
			return a * 2, nil
		})
	})
	url := storeURL(t)
	cfg := func(c *trellis.Config) {
		c.TracerProvider = tp
		c.Worker.ShutdownGrace = 50 * time.Millisecond
		c.Worker.LeaseDuration = 2 * time.Second
	}
	first, err := trellis.Open(context.Background(), func() trellis.Config {
		c := trellis.Config{Store: url}
		cfg(&c)
		return c
	}())
	if err != nil {
		t.Fatal(err)
	}
	register(t, first, wf)
	ctx, root := tp.Tracer("test").Start(ctxT(t), "request")
	h := must[*trellis.Handle[int]](t)(trellis.Start(ctx, first, wf, 21))
	root.End()
	<-started
	closing.Store(true)
	if err := first.Close(); err != nil { // hands the run back mid-step
		t.Fatal(err)
	}
	second := open(t, url, cfg)
	register(t, second, wf)
	run := must[*trellis.Run](t)(second.Wait(ctxT(t), h.RunID()))
	if run.Status != trellis.StatusSucceeded || string(run.Output) != "42" {
		t.Fatalf("run %s with output %s, want succeeded with 42", run.Status, run.Output)
	}
	waitFor(t, func() bool { return len(spansNamed(sr, "run traced")) == 2 })

	traceID := root.SpanContext().TraceID()
	starts := spansNamed(sr, "trellis.Start")
	if len(starts) != 1 || starts[0].Parent().SpanID() != root.SpanContext().SpanID() {
		t.Fatalf("trellis.Start spans %v, want one, child of the request span", starts)
	}
	startID := starts[0].SpanContext().SpanID()
	runs := spansNamed(sr, "run traced")
	runIDs := map[trace.SpanID]bool{}
	for i, s := range runs {
		if s.SpanContext().TraceID() != traceID || s.Parent().SpanID() != startID {
			t.Errorf("run span %d: trace %s parent %s, want trace %s parent %s (the start)", i,
				s.SpanContext().TraceID(), s.Parent().SpanID(), traceID, startID)
		}
		runIDs[s.SpanContext().SpanID()] = true
	}
	// The run spans' attributes: the run, its claim, the ops replayed, what
	// the attempt left the run in.
	for i, s := range runs {
		want := map[string]string{"trellis.run_id": h.RunID(), "trellis.workflow_id": h.ID(),
			"trellis.attempt": fmt.Sprint(i + 1), "trellis.status": []string{"pending", "succeeded"}[i]}
		if i == 1 {
			want["trellis.replayed_ops"] = "1" // "first", recorded before the hand-back
		}
		for k, v := range want {
			if got := spanAttr(s, k); got != v {
				t.Errorf("run span %d: %s = %q, want %q", i, k, got, v)
			}
		}
		if got := spanAttr(s, "trellis.queue"); got != "" {
			t.Errorf("run span %d on the default queue has trellis.queue %q", i, got)
		}
	}
	steps := append(spansNamed(sr, "step first"), spansNamed(sr, "step second")...)
	if len(steps) != 3 { // first once (replayed, not run, after the hand-back), second twice
		t.Fatalf("%d step spans, want 3", len(steps))
	}
	for _, s := range steps {
		if s.SpanContext().TraceID() != traceID || !runIDs[s.Parent().SpanID()] {
			t.Errorf("step span %s is not a child of a run span of the trace", s.Name())
		}
	}
}

// spanAttr is the value of a span's attribute as text; "" when it has none.
func spanAttr(s sdktrace.ReadOnlySpan, key string) string {
	for _, kv := range s.Attributes() {
		if string(kv.Key) == key {
			return kv.Value.String()
		}
	}
	return ""
}

// Runs started by StartMany and by StartTx inside a trace join it as Start's
// do: each run attempt's span is a child of the span of the call that started
// it, in the caller's trace.
func TestTracesJoinFromStartManyAndStartTx(t *testing.T) {
	t.Parallel()
	forEachSQLStore(t, func(t *testing.T, db *userDB) {
		sr := tracetest.NewSpanRecorder()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
		defer func() { _ = tp.Shutdown(context.Background()) }()
		wf := trellis.NewWorkflow("traced-many", func(wc *trellis.Context, in int) (int, error) {
			return trellis.Step(wc, "double", func(ctx context.Context) (int, error) { return 2 * in, nil })
		})
		c := open(t, db.url, func(c *trellis.Config) {
			c.TracerProvider = tp
			c.Worker.PollInterval = 50 * time.Millisecond // StartTx on SQLite waits for a poll
		})
		register(t, c, wf)
		ctx, root := tp.Tracer("test").Start(ctxT(t), "request")
		res, err := c.StartMany(ctx, []trellis.StartRequest{{Workflow: "traced-many", Input: []byte("1")}, {Workflow: "traced-many", Input: []byte("2")}})
		if err != nil {
			t.Fatal(err)
		}
		tx, commit, _ := db.begin(t)
		h := must[*trellis.Handle[int]](t)(trellis.StartTx(ctx, c, tx, wf, 3))
		commit()
		root.End()
		parentOf := map[string]string{h.RunID(): "trellis.StartTx"}
		for _, r := range res {
			if r.Run == nil {
				t.Fatalf("StartMany item: %+v", r)
			}
			parentOf[r.Run.ID] = "trellis.StartMany"
		}
		for id := range parentOf {
			if run := must[*trellis.Run](t)(c.Wait(ctxT(t), id)); run.Status != trellis.StatusSucceeded {
				t.Fatalf("run %s: %s", id, run.Status)
			}
		}
		waitFor(t, func() bool { return len(spansNamed(sr, "run traced-many")) == 3 })
		callSpan := map[string]trace.SpanID{}
		for _, name := range []string{"trellis.StartMany", "trellis.StartTx"} {
			spans := spansNamed(sr, name)
			if len(spans) != 1 || spans[0].Parent().SpanID() != root.SpanContext().SpanID() {
				t.Fatalf("%s spans %v, want one, child of the request span", name, spans)
			}
			callSpan[name] = spans[0].SpanContext().SpanID()
		}
		for _, s := range spansNamed(sr, "run traced-many") {
			id := spanAttr(s, "trellis.run_id")
			want := callSpan[parentOf[id]]
			if s.SpanContext().TraceID() != root.SpanContext().TraceID() || s.Parent().SpanID() != want {
				t.Errorf("run %s's span: trace %s parent %s, want trace %s parent %s (%s)", id, s.SpanContext().TraceID(),
					s.Parent().SpanID(), root.SpanContext().TraceID(), want, parentOf[id])
			}
		}
	})
}

// Child runs, of Child and of Map, join their parent's trace: each child's
// run span is a child of the parent's run attempt span that started it.
func TestTracesOfChildRunsJoinTheParent(t *testing.T) {
	t.Parallel()
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	leaf := trellis.NewWorkflow("traced-leaf", func(wc *trellis.Context, in int) (int, error) {
		return trellis.Step(wc, "square", func(ctx context.Context) (int, error) { return in * in, nil })
	})
	parent := trellis.NewWorkflow("traced-parent", func(wc *trellis.Context, in int) (int, error) {
		one, err := trellis.Child(wc, leaf, in)
		if err != nil {
			return 0, err
		}
		many, err := trellis.Map(wc, leaf, []int{1, 2})
		if err != nil {
			return 0, err
		}
		return one + many[0] + many[1], nil
	})
	c := open(t, storeURL(t), func(c *trellis.Config) { c.TracerProvider = tp })
	register(t, c, leaf, parent)
	ctx, root := tp.Tracer("test").Start(ctxT(t), "request")
	h := must[*trellis.Handle[int]](t)(trellis.Start(ctx, c, parent, 3))
	root.End()
	if got := mustResult(t, h); got != 14 {
		t.Fatalf("result %d, want 14", got)
	}
	waitFor(t, func() bool { return len(spansNamed(sr, "run traced-leaf")) == 3 })
	parentSpans := map[trace.SpanID]bool{}
	for _, s := range spansNamed(sr, "run traced-parent") {
		if s.SpanContext().TraceID() != root.SpanContext().TraceID() {
			t.Fatalf("parent run span in trace %s, want %s", s.SpanContext().TraceID(), root.SpanContext().TraceID())
		}
		parentSpans[s.SpanContext().SpanID()] = true
	}
	for _, s := range spansNamed(sr, "run traced-leaf") {
		if s.SpanContext().TraceID() != root.SpanContext().TraceID() || !parentSpans[s.Parent().SpanID()] {
			t.Errorf("child run %s's span: trace %s parent %s, want trace %s and a run span of the parent as parent",
				spanAttr(s, "trellis.run_id"), s.SpanContext().TraceID(), s.Parent().SpanID(), root.SpanContext().TraceID())
		}
	}
}

func spansNamed(sr *tracetest.SpanRecorder, name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range sr.Ended() {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

func scrape(t *testing.T, m *trellis.Metrics) string {
	t.Helper()
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func grepLines(text, prefix string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

func metricValue(text, name string) float64 {
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, name+" ") {
			var v float64
			_, _ = fmt.Sscan(strings.TrimPrefix(l, name+" "), &v)
			return v
		}
	}
	return -1
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A step's first attempt has a span without attributes (its name says the
// step); a retry's span carries its attempt number; a failed attempt's span
// has the error status.
func TestStepSpansOfRetries(t *testing.T) {
	t.Parallel()
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	wf := trellis.NewWorkflow("retried", func(wc *trellis.Context, _ int) (int, error) {
		return trellis.Step(wc, "flaky", func(ctx context.Context) (int, error) {
			if trellis.StepInfo(ctx).Attempt == 1 {
				return 0, errBoom
			}
			return 1, nil
		}, trellis.StepOptions{Retry: trellis.RetryPolicy{MaxAttempts: 2, Backoff: trellis.Fixed(time.Millisecond)}})
	})
	c := open(t, storeURL(t), func(c *trellis.Config) { c.TracerProvider = tp })
	register(t, c, wf)
	mustResult(t, must[*trellis.Handle[int]](t)(trellis.Start(ctxT(t), c, wf, 0)))
	waitFor(t, func() bool { return len(spansNamed(sr, "step flaky")) == 2 })
	steps := spansNamed(sr, "step flaky")
	if len(steps[0].Attributes()) != 0 || steps[0].Status().Code != codes.Error {
		t.Errorf("first attempt: attributes %v, status %v; want none and an error", steps[0].Attributes(), steps[0].Status())
	}
	if got := spanAttr(steps[1], "trellis.attempt"); got != "2" || steps[1].Status().Code == codes.Error {
		t.Errorf("retry: trellis.attempt %q, status %v; want 2 and no error", got, steps[1].Status())
	}
}

// spanLog is a slog.Handler that keeps, for each message, the span contexts of
// the contexts it was logged with.
type spanLog struct {
	mu    sync.Mutex
	spans map[string][]trace.SpanContext
}

func (h *spanLog) Enabled(context.Context, slog.Level) bool { return true }
func (h *spanLog) Handle(ctx context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.spans[r.Message] = append(h.spans[r.Message], trace.SpanContextFromContext(ctx))
	return nil
}
func (h *spanLog) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *spanLog) WithGroup(string) slog.Handler      { return h }

func (h *spanLog) of(msg string) []trace.SpanContext {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.spans[msg])
}

// The built-in logging lines are written in the context the attempt ran with,
// inside the tracing interceptor: a failed step attempt's line carries that
// attempt's span, a run attempt's line its run span, so a handler can join
// logs to traces. The metrics count the same attempts.
func TestBuiltInLogLinesCarryTheirSpans(t *testing.T) {
	t.Parallel()
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	logs := &spanLog{spans: map[string][]trace.SpanContext{}}
	m := trellis.NewMetrics()
	wf := trellis.NewWorkflow("logged", func(wc *trellis.Context, _ int) (int, error) {
		return trellis.Step(wc, "flaky", func(ctx context.Context) (int, error) {
			if trellis.StepInfo(ctx).Attempt == 1 {
				return 0, errBoom
			}
			return 1, nil
		}, trellis.StepOptions{Retry: trellis.RetryPolicy{MaxAttempts: 2, Backoff: trellis.Fixed(time.Millisecond)}})
	})
	c := open(t, storeURL(t), func(c *trellis.Config) {
		c.TracerProvider, c.Logger, c.Metrics = tp, slog.New(logs), m
	})
	register(t, c, wf)
	mustResult(t, must[*trellis.Handle[int]](t)(trellis.Start(ctxT(t), c, wf, 0)))
	waitFor(t, func() bool { return len(spansNamed(sr, "run logged")) >= 1 && len(logs.of("run attempt ended")) >= 1 })

	steps := spansNamed(sr, "step flaky")
	failed := logs.of("step attempt failed")
	if len(steps) != 2 || len(failed) != 1 || failed[0].SpanID() != steps[0].SpanContext().SpanID() {
		t.Errorf("step attempt failed logged in span %v; the first attempt's span is %v", failed, steps[0].SpanContext())
	}
	runSpans := map[trace.SpanID]bool{}
	for _, s := range spansNamed(sr, "run logged") {
		runSpans[s.SpanContext().SpanID()] = true
	}
	for _, sc := range logs.of("run attempt ended") {
		if !runSpans[sc.SpanID()] {
			t.Errorf("run attempt ended logged in span %v, not a run span", sc)
		}
	}
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	for _, want := range []string{
		`trellis_step_attempts_total{outcome="error",workflow="logged"} 1`,
		`trellis_step_attempts_total{outcome="ok",workflow="logged"} 1`,
		`trellis_step_attempt_duration_seconds_count{workflow="logged"} 2`,
		`trellis_runs_started_total{workflow="logged"} 1`,
		`trellis_runs_ended_total{status="succeeded",workflow="logged"} 1`,
	} {
		if !strings.Contains(rec.Body.String(), want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

// A job's attempts count as run attempts by the status they saved, and its
// end as a run's end: they were counted as attempts that saved nothing.
func TestMetricsCountJobs(t *testing.T) {
	t.Parallel()
	m := trellis.NewMetrics()
	j := trellis.NewJob("metered-job", func(ctx context.Context, n int) (int, error) { return 2 * n, nil })
	c := open(t, storeURL(t), func(cfg *trellis.Config) { cfg.Metrics = m })
	register(t, c, j)
	mustResult(t, must[*trellis.Handle[int]](t)(trellis.StartJob(ctxT(t), c, j, 21)))
	waitFor(t, func() bool {
		return strings.Contains(scrape(t, m), `trellis_runs_ended_total{status="succeeded",workflow="metered-job"} 1`)
	})
	text := scrape(t, m)
	if !strings.Contains(text, `trellis_run_attempts_total{status="succeeded",workflow="metered-job"} 1`) ||
		strings.Contains(text, `trellis_run_attempts_total{status="lost",workflow="metered-job"}`) {
		t.Fatalf("a job's attempt:\n%s", grepLines(text, "trellis_run_attempts_total"))
	}
}
