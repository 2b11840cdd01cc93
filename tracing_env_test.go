package trellis_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/trellis-dev/trellis"
)

// otelEnv are the variables TracerFromEnv reads, cleared for a test.
var otelEnv = []string{"OTEL_SDK_DISABLED", "OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT",
	"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
	"OTEL_SERVICE_NAME", "OTEL_TRACES_SAMPLER", "OTEL_TRACES_SAMPLER_ARG", "OTEL_RESOURCE_ATTRIBUTES", "OTEL_BSP_SCHEDULE_DELAY"}

// setOtelEnv clears the OTEL_* variables, then sets kv (name, value, ...).
func setOtelEnv(t *testing.T, kv ...string) {
	t.Helper()
	for _, k := range otelEnv {
		t.Setenv(k, "")
	}
	for i := 0; i+1 < len(kv); i += 2 {
		t.Setenv(kv[i], kv[i+1])
	}
}

// TracerFromEnv exports the spans of a run to the OTLP endpoint the standard
// variables name, over OTLP/HTTP (the default) or gRPC as the protocol
// variables say, with the service name of OTEL_SERVICE_NAME.
func TestTracerFromEnvExports(t *testing.T) {
	httpRecv, httpURL := newOTLPHTTPReceiver(t)
	grpcRecv, grpcURL := newOTLPGRPCReceiver(t)
	for _, tc := range []struct {
		name string
		env  []string
		recv *otlpReceiver
	}{
		{"http by default", []string{"OTEL_EXPORTER_OTLP_ENDPOINT", httpURL}, httpRecv},
		{"http/protobuf", []string{"OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf", "OTEL_EXPORTER_OTLP_ENDPOINT", httpURL}, httpRecv},
		{"grpc", []string{"OTEL_EXPORTER_OTLP_PROTOCOL", "grpc", "OTEL_EXPORTER_OTLP_ENDPOINT", grpcURL}, grpcRecv},
		{"traces protocol first", []string{"OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "grpc",
			"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", grpcURL, "OTEL_TRACES_EXPORTER", "otlp"}, grpcRecv},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The SDK reads the service name once per process: the same in every case.
			const service = "trellis-env-test"
			setOtelEnv(t, append(tc.env, "OTEL_SERVICE_NAME", service, "OTEL_BSP_SCHEDULE_DELAY", "50")...)
			name := "exported-" + strings.ReplaceAll(tc.name, " ", "-")
			tp, shutdown, err := trellis.TracerFromEnv(ctxT(t))
			if err != nil || tp == nil {
				t.Fatalf("TracerFromEnv = %v, %v; want a provider", tp, err)
			}
			wf := trellis.NewWorkflow(name, func(wc *trellis.Context, in int) (int, error) {
				return trellis.Step(wc, "only", func(ctx context.Context) (int, error) { return in, nil })
			})
			c := open(t, sqliteURL(t), func(cfg *trellis.Config) { cfg.TracerProvider = tp })
			register(t, c, wf)
			mustResult(t, must[*trellis.Handle[int]](t)(trellis.Start(ctxT(t), c, wf, 1)))
			ctx, cancel := context.WithTimeout(ctxT(t), 10*time.Second)
			defer cancel()
			waitFor(t, func() bool { return len(spansOf(tc.recv, "run "+name, service)) == 1 })
			if err := shutdown(ctx); err != nil { // flushes the step's span if still batched
				t.Fatalf("shutdown: %v", err)
			}
			runs := spansOf(tc.recv, "run "+name, service)
			var steps []*receivedSpan
			for _, s := range spansOf(tc.recv, "step only", service) {
				if len(runs) == 1 && s.traceID() == runs[0].traceID() {
					steps = append(steps, s)
				}
			}
			if len(runs) != 1 || len(steps) != 1 {
				t.Fatalf("received %d run spans and %d step spans of their trace from service %s, want 1 and 1", len(runs), len(steps), service)
			}
			if steps[0].parentID() != runs[0].spanID() {
				t.Errorf("the step span is not the run span's child")
			}
			if runs[0].attr("trellis.status") != "succeeded" {
				t.Errorf("run span trellis.status = %q", runs[0].attr("trellis.status"))
			}
		})
	}
}

// spansOf returns the spans named name that service sent.
func spansOf(r *otlpReceiver, name, service string) []*receivedSpan {
	var out []*receivedSpan
	for _, s := range r.named(name) {
		if s.Service == service {
			out = append(out, s)
		}
	}
	return out
}

// TracerFromEnv turns tracing off when told to, or when nothing names an
// endpoint, and refuses an exporter or protocol it does not know, naming the
// variable.
func TestTracerFromEnvOffAndErrors(t *testing.T) {
	for _, tc := range []struct {
		name    string
		env     []string
		wantErr string // "" : tracing off, no error
	}{
		{"nothing set", nil, ""},
		{"exporter none", []string{"OTEL_TRACES_EXPORTER", "none", "OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1"}, ""},
		{"sdk disabled", []string{"OTEL_SDK_DISABLED", "true", "OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1"}, ""},
		{"unknown exporter", []string{"OTEL_TRACES_EXPORTER", "zipkin"}, `OTEL_TRACES_EXPORTER="zipkin"`},
		{"unknown protocol", []string{"OTEL_EXPORTER_OTLP_PROTOCOL", "carrier-pigeon", "OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1"},
			`OTEL_EXPORTER_OTLP_PROTOCOL="carrier-pigeon"`},
		{"http/json", []string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/json", "OTEL_TRACES_EXPORTER", "otlp"},
			`OTEL_EXPORTER_OTLP_TRACES_PROTOCOL="http/json"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			setOtelEnv(t, tc.env...)
			tp, shutdown, err := trellis.TracerFromEnv(ctxT(t))
			if shutdown == nil {
				t.Fatal("shutdown is nil")
			}
			switch {
			case tc.wantErr == "" && (err != nil || tp != nil):
				t.Fatalf("TracerFromEnv = %v, %v; want tracing off", tp, err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("TracerFromEnv error %v, want one naming %s", err, tc.wantErr)
			}
		})
	}
}
