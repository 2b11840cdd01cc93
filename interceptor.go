package trellis

import (
	"context"
	"log/slog"
	"time"

	"github.com/trellis-dev/trellis/internal/engine"
	"github.com/trellis-dev/trellis/internal/queuedefaults"
	"github.com/trellis-dev/trellis/internal/worker"
	"github.com/trellis-dev/trellis/store"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Interceptor wraps execution: each attempt of a workflow run on this client's
// worker, each step attempt, and each call of a Client method. Any of its
// functions may be nil. Each must call next exactly once, with ctx or a context
// derived from it (to carry a value, say a tenant, or a span), and return what
// next returned unless it means to change it.
//
// Config.Interceptors run in order, the first outermost. The built-in ones
// (tracing with Config.TracerProvider, metrics with Config.Metrics, logging of
// Config.Logger) run outside them all, in that order. See docs/observability.md.
type Interceptor struct {
	// Workflow wraps one execution of a run: from its claim, through the replay
	// of its history and the new ops, to the checkpoint that leaves it finished,
	// waiting, blocked or handed back. a.Status and a.Error are set when next
	// returns. The steps of the attempt run in contexts derived from the one
	// given to next.
	Workflow func(ctx context.Context, a *WorkflowAttempt, next func(context.Context))
	// Step wraps one attempt of a step (Step, Async, TxStep, a Map item): next
	// runs the step function (for all but TxStep on a goroutine of its own, so
	// that an attempt that ignores its context is abandoned shortly after the
	// context ends: next then returns the context's error). StepInfo(ctx) is
	// s.StepAttempt.
	// Steps replayed from history do not run and are not intercepted.
	Step func(ctx context.Context, s *StepCall, next func(context.Context) error) error
	// Call wraps each Client method that makes a call (every one but Close
	// and StartQueue, a lookup of a start's queue: Start, Get, List, Cancel,
	// SendEvent, Stream, the namespace, queue and schedule methods, ...),
	// StartTx and Handle.Result: next performs it, through the store or the
	// server. A call is intercepted once: the calls a method makes to other
	// methods are not. Stream's next is the whole iteration.
	Call func(ctx context.Context, c *ClientCall, next func(context.Context) error) error

	// The built-in interceptors use more forms, which leave the stack as it is
	// when they have nothing to wrap. Every interceptor in a chain adds a few
	// frames to the stack below it; a Start in a goroutine of its own then
	// outgrew its first stack, and growing it (copying every frame) cost as
	// much as the spans themselves in w1 with tracing on.
	//
	// callIf, when set, restricts Call to the calls it approves: the others skip
	// this interceptor (tracing wraps only calls made inside a trace).
	callIf func(ctx context.Context, c *ClientCall) bool
	// The ...Done functions observe a call, a workflow attempt (a.Status set)
	// or a step attempt (with its duration) once it returned, after the
	// interceptors that wrap it, without wrapping it (metrics, logging). Their
	// ctx is the one the call or attempt ran with, inside every wrapper (with
	// the span of the tracing interceptor, for one).
	callDone     func(ctx context.Context, c *ClientCall, err error)
	workflowDone func(ctx context.Context, a *WorkflowAttempt)
	stepDone     func(ctx context.Context, s *StepCall, err error, d time.Duration)
}

// WorkflowAttempt describes one execution of a run (see Interceptor.Workflow).
// Its Attempt counts claims, as Context.RunAttempt does; the attempt of the
// workflow function that workflow retries count is Context.WorkflowAttempt
// (docs/workflow-retries.md).
type WorkflowAttempt struct {
	RunID      string
	WorkflowID string
	Workflow   string
	Queue      string
	// Attempt counts the claims of the run, this one included: 1 for its first
	// execution, more after waits, hand-backs and crashes.
	Attempt int
	// Replayed is the number of ops its history held when claimed.
	Replayed int
	// Status is what the execution left the run in, set when next returns:
	// StatusSucceeded, StatusFailed or StatusCancelled when it ended,
	// StatusWaiting, StatusBlocked, or StatusPending when it was handed back;
	// "" when nothing was saved (the lease was lost or the store failed: another
	// worker takes it over).
	Status Status
	// Error is the run's error when it ended failed or cancelled.
	Error *RunError
}

// StepCall describes one step attempt (see Interceptor.Step).
type StepCall struct {
	StepAttempt
	WorkflowID string
	Workflow   string
}

// ClientCall describes a Client method call (see Interceptor.Call).
type ClientCall struct {
	// Method is the Client method's name, e.g. "Start" (Start and StartRaw),
	// "StartTx", "Get", "SendEvent", "CreateQueue"; "Result" for Handle.Result.
	Method string
	// Workflow is the workflow the call names: the one a Start or StartTx
	// starts, a schedule's (CreateSchedule, UpdateSchedule); "" for other
	// methods.
	Workflow string
	// Ref is what the method is about, when it names one thing: the run ID or
	// workflow ID of a run method (a Start's workflow ID when given, the run
	// filter of Approvals), the ID of an approval, the name of a namespace,
	// queue or schedule.
	Ref string
}

// chain is the interceptors of a client, the built-in ones first.
type chain struct {
	workflow []func(context.Context, *WorkflowAttempt, func(context.Context))
	step     []func(context.Context, *StepCall, func(context.Context) error) error
	call     []callLink

	// observers (see Interceptor.callDone), in the interceptors' order
	callDone     []func(context.Context, *ClientCall, error)
	workflowDone []func(context.Context, *WorkflowAttempt)
	stepDone     []func(context.Context, *StepCall, error, time.Duration)
}

// callLink is an Interceptor's Call and its callIf.
type callLink struct {
	wrap func(context.Context, *ClientCall, func(context.Context) error) error
	when func(context.Context, *ClientCall) bool // nil: every call
}

func newChain(ics []Interceptor) *chain {
	ch := &chain{}
	for _, ic := range ics {
		if ic.Workflow != nil {
			ch.workflow = append(ch.workflow, ic.Workflow)
		}
		if ic.Step != nil {
			ch.step = append(ch.step, ic.Step)
		}
		if ic.Call != nil {
			ch.call = append(ch.call, callLink{wrap: ic.Call, when: ic.callIf})
		}
		if ic.callDone != nil {
			ch.callDone = append(ch.callDone, ic.callDone)
		}
		if ic.workflowDone != nil {
			ch.workflowDone = append(ch.workflowDone, ic.workflowDone)
		}
		if ic.stepDone != nil {
			ch.stepDone = append(ch.stepDone, ic.stepDone)
		}
	}
	return ch
}

// runWorkflow calls the workflow interceptors from i on, then last.
func (ch *chain) runWorkflow(ctx context.Context, i int, a *WorkflowAttempt, last func(context.Context)) {
	if i == len(ch.workflow) {
		last(ctx)
		return
	}
	ch.workflow[i](ctx, a, func(ctx context.Context) { ch.runWorkflow(ctx, i+1, a, last) })
}

// interceptStep is the engine's Config.InterceptStep for the chain (nil when no
// interceptor wraps or observes steps, so that steps pay nothing).
func (ch *chain) interceptStep() func(context.Context, *store.Run, func(context.Context) error) error {
	if len(ch.step) == 0 && len(ch.stepDone) == 0 {
		return nil
	}
	return func(ctx context.Context, run *store.Run, next func(context.Context) error) error {
		st := &stepRun{ch: ch, s: StepCall{StepAttempt: StepInfo(ctx), WorkflowID: run.WorkflowID, Workflow: run.Workflow},
			next: next, inner: ctx}
		if len(ch.stepDone) == 0 {
			return st.from(ctx, 0)
		}
		t0 := time.Now()
		err := st.from(ctx, 0)
		d := time.Since(t0)
		for _, done := range ch.stepDone {
			done(st.inner, &st.s, err, d)
		}
		return err
	}
}

// stepRun is one step attempt going through the step interceptors: one
// allocation for the call, the context the attempt ran with, and what is
// left to call (a closure for each of these cost the metrics and tracing
// interceptors of w1 four allocations per step).
type stepRun struct {
	ch    *chain
	s     StepCall
	next  func(context.Context) error // the step attempt itself
	inner context.Context             // the context next ran with
}

// from calls the step interceptors from i on, then the attempt.
func (st *stepRun) from(ctx context.Context, i int) error {
	if i == len(st.ch.step) {
		st.inner = ctx
		return st.next(ctx)
	}
	return st.ch.step[i](ctx, &st.s, func(ctx context.Context) error { return st.from(ctx, i+1) })
}

// call runs a Client method f inside the call interceptors.
func (c *Client) call(ctx context.Context, cc ClientCall, f func(context.Context) error) error {
	if c.chain == nil || len(c.chain.call) == 0 && len(c.chain.callDone) == 0 {
		return f(ctx)
	}
	cr := &callRun{ch: c.chain, c: cc, last: f, inner: ctx}
	err := cr.from(ctx, 0)
	for _, done := range c.chain.callDone {
		done(cr.inner, &cr.c, err)
	}
	return err
}

// callRun is one Client call going through the call interceptors (see
// stepRun).
type callRun struct {
	ch    *chain
	c     ClientCall
	last  func(context.Context) error // the call itself
	inner context.Context             // the context last ran with
}

// from calls the call interceptors from i on that apply to the call, then the
// call.
func (cr *callRun) from(ctx context.Context, i int) error {
	ch := cr.ch
	for i < len(ch.call) && ch.call[i].when != nil && !ch.call[i].when(ctx, &cr.c) {
		i++
	}
	if i == len(ch.call) {
		cr.inner = ctx
		return cr.last(ctx)
	}
	return ch.call[i].wrap(ctx, &cr.c, func(ctx context.Context) error { return cr.from(ctx, i+1) })
}

// executor is the worker's Executor: the engine inside the workflow
// interceptors, in the trace context the run was started with.
type executor struct {
	eng   *engine.Engine
	chain *chain
	// queues, when set, gives each run its queue's default retry policy.
	queues *queuedefaults.Cache
}

func (x *executor) Execute(ctx context.Context, cr *store.ClaimedRun, ctl *worker.Control) {
	x.queues.Fill(ctx, cr)
	if len(x.chain.workflow) == 0 && len(x.chain.workflowDone) == 0 {
		x.eng.Execute(ctx, cr, ctl)
		return
	}
	r := cr.Run
	if r.TraceParent != "" {
		ctx = withTraceParent(ctx, r.TraceParent)
	}
	a := &WorkflowAttempt{RunID: r.ID, WorkflowID: r.WorkflowID, Workflow: r.Workflow, Queue: r.Queue,
		Attempt: r.Attempts, Replayed: len(cr.History)}
	execute := func(ctx context.Context) {
		oc := x.eng.ExecuteOutcome(ctx, cr, ctl)
		a.Status = Status(oc.Status)
		if oc.Error != nil {
			a.Error = &RunError{Message: oc.Error.Message, Type: oc.Error.Type}
		}
	}
	inner := ctx
	if len(x.chain.workflow) == 0 {
		execute(ctx) // observers alone (metrics, logging) wrap nothing
	} else {
		// The wrappers' frames (a span's start, for one) sit below the
		// engine's: the goroutine would outgrow its first stack deep in the
		// run's final checkpoint and copy every frame; grown here, it copies
		// none.
		engine.GrowStack()
		x.chain.runWorkflow(ctx, 0, a, func(ctx context.Context) {
			inner = ctx
			execute(ctx)
		})
	}
	for _, done := range x.chain.workflowDone {
		done(inner, a)
	}
}

// traceContext is the W3C trace context propagator (traceparent, tracestate).
var traceContext propagation.TraceContext

// traceParentOf returns the traceparent of the span in ctx; "" when there is none.
func traceParentOf(ctx context.Context) string {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return ""
	}
	carrier := propagation.MapCarrier{}
	traceContext.Inject(ctx, carrier)
	return carrier["traceparent"]
}

// withTraceParent returns ctx carrying the remote span context of traceparent.
func withTraceParent(ctx context.Context, traceparent string) context.Context {
	return traceContext.Extract(ctx, propagation.MapCarrier{"traceparent": traceparent})
}

// interceptors are the client's interceptors: the built-in ones (tracing,
// metrics, logging), then Config.Interceptors.
func (c Config) interceptors() []Interceptor {
	var out []Interceptor
	if c.TracerProvider != nil {
		out = append(out, tracingInterceptor(c.TracerProvider))
	}
	if c.Metrics != nil {
		out = append(out, c.Metrics.interceptor())
	}
	if c.Logger.Handler() != slog.DiscardHandler {
		out = append(out, loggingInterceptor(c.Logger))
	}
	return append(out, c.Interceptors...)
}

// onClaim is the worker's OnClaim: nil without metrics.
func (c Config) onClaim() func(time.Duration, int) {
	if c.Metrics == nil {
		return nil
	}
	m := c.Metrics // not the whole Config in the closure
	return func(d time.Duration, _ int) { m.observeClaim(d) }
}

// onEndedAttempts is the worker's OnEndedAttempts: nil without metrics.
func (c Config) onEndedAttempts() func([]store.EndedAttemptInfo) {
	if c.Metrics == nil {
		return nil
	}
	return c.Metrics.observeEndedAttempts
}
