package trellis

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/trellis-dev/trellis/internal/otlpexport"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// tracerName is the instrumentation scope of Trellis' spans.
const tracerName = "github.com/trellis-dev/trellis"

// tracingInterceptor is the built-in tracing interceptor: a span for each run
// attempt, a child span for each step attempt, a span for each client call
// made inside a trace.
// A run attempt's span is a child of the span that started the run: the worker
// puts the run's stored trace context in the attempt's context first.
func tracingInterceptor(tp trace.TracerProvider) Interceptor {
	tr := tp.Tracer(tracerName)
	runNames, stepNames, callNames := newSpanNames("run "), newSpanNames("step "), newSpanNames("trellis.")
	return Interceptor{
		// A run span's start options are shared (building them for each run
		// cost two allocations); its attributes are set as it ends (endRunSpan).
		Workflow: func(ctx context.Context, a *WorkflowAttempt, next func(context.Context)) {
			ctx, span := tr.Start(ctx, runNames.get(a.Workflow), runSpanOptions...)
			next(ctx)
			endRunSpan(span, a)
		},
		Step: func(ctx context.Context, s *StepCall, next func(context.Context) error) error {
			ctx, span := tr.Start(ctx, stepNames.get(s.Step), stepSpanOptions(s)...)
			err := next(ctx)
			endStepSpan(span, err)
			return err
		},
		// Only calls made inside a trace are traced: a run started outside one
		// has root spans, not one more root per call.
		callIf: func(ctx context.Context, _ *ClientCall) bool { return trace.SpanContextFromContext(ctx).IsValid() },
		Call: func(ctx context.Context, c *ClientCall, next func(context.Context) error) error {
			ctx, span := tr.Start(ctx, callNames.get(c.Method), callSpanKind(c.Method))
			if c.Workflow != "" {
				span.SetAttributes(attribute.String("trellis.workflow", c.Workflow))
			}
			err := next(ctx)
			if err != nil {
				span.SetStatus(codes.Error, err.Error())
			}
			span.End()
			return err
		},
	}
}

// callSpanKind is the kind of a client call's span: a producer for the
// calls that hand work to runs (starts, events), a client for the others
// (reads, waits, changes to records).
func callSpanKind(method string) trace.SpanStartOption {
	switch method {
	case "Start", "StartMany", "StartTx", "SendEvent":
		return producerSpan
	}
	return clientSpan
}

var (
	producerSpan = trace.WithSpanKind(trace.SpanKindProducer)
	clientSpan   = trace.WithSpanKind(trace.SpanKindClient)
)

// runSpanOptions are the start options of a run attempt's span.
var runSpanOptions = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindConsumer)}

// endRunSpan ends a run attempt's span. Its attributes are set in one call as the
// attempt ends, when the status is known: given at the start as well, the SDK
// copies them into the options, then into the span, and grows the span's slice
// again for the status (three allocations more per run). Each attribute costs it
// about half a microsecond, so the workflow is in the span's name, and the queue
// and the replayed ops are set only when they say something.
func endRunSpan(span trace.Span, a *WorkflowAttempt) {
	if span.IsRecording() {
		var optional [2]attribute.KeyValue // on the stack: the slice below is sized to fit
		opt := optional[:0]
		if a.Queue != "default" {
			opt = append(opt, attribute.String("trellis.queue", a.Queue))
		}
		if a.Replayed > 0 {
			opt = append(opt, attribute.Int("trellis.replayed_ops", a.Replayed))
		}
		set := append(make([]attribute.KeyValue, 0, 4+len(opt)), attribute.String("trellis.run_id", a.RunID),
			attribute.String("trellis.workflow_id", a.WorkflowID), attribute.Int("trellis.attempt", a.Attempt),
			attribute.String("trellis.status", string(a.Status)))
		span.SetAttributes(append(set, opt...)...)
	}
	if a.Error != nil {
		span.SetStatus(codes.Error, a.Error.Message)
	}
	span.End()
}

// stepSpanOptions are the start options of a step attempt's span. The run's
// attributes are on the parent span and the step's name is in the span's: a first
// attempt has no attributes, a retry its number.
func stepSpanOptions(s *StepCall) []trace.SpanStartOption {
	if s.Attempt <= 1 {
		return nil
	}
	return []trace.SpanStartOption{trace.WithAttributes(attribute.Int("trellis.attempt", s.Attempt))}
}

// endStepSpan ends a step attempt's span, with err's message when it failed.
func endStepSpan(span trace.Span, err error) {
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// spanNames keeps the span names made of a prefix and a workflow's or a step's
// name, so that a span does not build its name again: one allocation less per
// span. Readers take no lock (the map is replaced, never changed: spans of both
// of a worker's goroutines read it at once). It keeps at most maxSpanNames
// names (step names made at run time, such as one per item, would grow it
// without end); past that, names are built.
type spanNames struct {
	prefix string
	names  atomic.Pointer[map[string]string] // name → prefix+name
	mu     sync.Mutex                        // serializes replacements
}

const maxSpanNames = 1024

func newSpanNames(prefix string) *spanNames {
	sn := &spanNames{prefix: prefix}
	sn.names.Store(&map[string]string{})
	return sn
}

func (sn *spanNames) get(name string) string {
	names := *sn.names.Load()
	if full, ok := names[name]; ok {
		return full
	}
	full := sn.prefix + name
	if len(names) >= maxSpanNames {
		return full // full: nothing to add, no lock to take
	}
	sn.mu.Lock()
	defer sn.mu.Unlock()
	old := *sn.names.Load()
	if _, ok := old[name]; !ok && len(old) < maxSpanNames {
		next := make(map[string]string, len(old)+1)
		maps.Copy(next, old)
		next[name] = full
		sn.names.Store(&next)
	}
	return full
}

// TracerFromEnv returns a tracer provider that exports spans over OTLP as the
// standard OTEL_* environment variables say, for Config.TracerProvider; call
// shutdown at exit to flush. It reads:
//
//   - OTEL_TRACES_EXPORTER: "otlp" (the default) or "none" (tracing off);
//   - OTEL_EXPORTER_OTLP_TRACES_PROTOCOL, else OTEL_EXPORTER_OTLP_PROTOCOL:
//     "http/protobuf" (the default) or "grpc";
//   - OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_EXPORTER_OTLP_TRACES_ENDPOINT,
//     OTEL_EXPORTER_OTLP_HEADERS, OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES,
//     OTEL_TRACES_SAMPLER, ... as the OpenTelemetry SDK reads them.
//
// The exporters are in package github.com/trellis-dev/trellis/otlp, which a
// program that exports imports for its side effect
// (import _ "github.com/trellis-dev/trellis/otlp"): they link gRPC, which
// package trellis leaves out. Without it, TracerFromEnv fails with an error
// naming the import when the environment asks for export.
//
// Any other value of the exporter or the protocol is an error. It returns nil
// and a no-op shutdown (tracing off) when OTEL_SDK_DISABLED is "true", when
// OTEL_TRACES_EXPORTER is "none", and when OTEL_TRACES_EXPORTER is not set
// and neither endpoint variable is (set it to "otlp" to export to the
// protocol's default endpoint on localhost).
func TracerFromEnv(ctx context.Context) (tp trace.TracerProvider, shutdown func(context.Context) error, err error) {
	noop := func(context.Context) error { return nil }
	if os.Getenv("OTEL_SDK_DISABLED") == "true" {
		return nil, noop, nil
	}
	switch exporter := strings.TrimSpace(os.Getenv("OTEL_TRACES_EXPORTER")); exporter {
	case "none":
		return nil, noop, nil
	case "":
		if os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" && os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" {
			return nil, noop, nil
		}
	case "otlp":
	default:
		return nil, noop, fmt.Errorf("tracing: OTEL_TRACES_EXPORTER=%q is not supported (want otlp or none)", exporter)
	}
	exp, err := otlpExporterFromEnv(ctx)
	if err != nil {
		return nil, noop, err
	}
	// The SDK reads OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES and
	// OTEL_TRACES_SAMPLER(_ARG) itself.
	sdk := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp))
	return sdk, sdk.Shutdown, nil
}

// otlpExporterFromEnv makes the OTLP exporter of the protocol the environment
// names, registered by package github.com/trellis-dev/trellis/otlp (see
// internal/otlpexport); the exporter reads its endpoint, headers and the rest
// itself.
func otlpExporterFromEnv(ctx context.Context) (sdktrace.SpanExporter, error) {
	name, protocol := "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", os.Getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if protocol == "" {
		name, protocol = "OTEL_EXPORTER_OTLP_PROTOCOL", os.Getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	chosen := strings.TrimSpace(protocol)
	switch chosen {
	case "":
		chosen = "http/protobuf"
	case "http/protobuf", "grpc":
	default:
		return nil, fmt.Errorf("tracing: %s=%q is not supported (want http/protobuf or grpc)", name, protocol)
	}
	newExporter := otlpexport.Lookup(chosen)
	if newExporter == nil {
		return nil, fmt.Errorf("tracing: no OTLP exporter for %s: %s", chosen, otlpexport.Import)
	}
	exp, err := newExporter(ctx)
	if err != nil {
		return nil, fmt.Errorf("tracing: creating the OTLP trace exporter: %w", err)
	}
	return exp, nil
}

// loggingInterceptor is the built-in logging interceptor: debug lines for the
// ends of run attempts and step attempts, with the keys of every line about a
// run: run_id, workflow, run_attempt (the run's claim count) for a run
// attempt, step and attempt (the step's attempt) for a step attempt. Nothing
// is formatted for a level the logger drops.
func loggingInterceptor(l *slog.Logger) Interceptor {
	return Interceptor{
		workflowDone: func(ctx context.Context, a *WorkflowAttempt) {
			if l.Enabled(ctx, slog.LevelDebug) {
				l.LogAttrs(ctx, slog.LevelDebug, "run attempt ended", slog.String("run_id", a.RunID),
					slog.String("workflow", a.Workflow), slog.Int("run_attempt", a.Attempt), slog.String("status", string(a.Status)))
			}
		},
		stepDone: func(ctx context.Context, s *StepCall, err error, _ time.Duration) {
			if err != nil && l.Enabled(ctx, slog.LevelInfo) {
				l.LogAttrs(ctx, slog.LevelInfo, "step attempt failed", slog.String("run_id", s.RunID),
					slog.String("workflow", s.Workflow), slog.String("step", s.Step), slog.Int("attempt", s.Attempt),
					slog.String("err", err.Error()))
			}
		},
	}
}
