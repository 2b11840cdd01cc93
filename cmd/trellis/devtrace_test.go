package main

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"
)

// trellis dev configures tracing from the standard OTEL_* variables, as trellis
// server does: the demo's runs and steps are exported over OTLP/HTTP, and
// flushed before it exits.
func TestDevTracesFromEnv(t *testing.T) {
	var mu sync.Mutex
	var names []string
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		var req coltracepb.ExportTraceServiceRequest
		if err == nil {
			err = proto.Unmarshal(b, &req)
		}
		if err != nil || r.URL.Path != "/v1/traces" {
			http.Error(w, "want an OTLP export at /v1/traces", http.StatusBadRequest)
			return
		}
		mu.Lock()
		for _, rs := range req.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				for _, sp := range ss.Spans {
					names = append(names, sp.Name)
				}
			}
		}
		mu.Unlock()
		out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
	}))
	defer recv.Close()
	for _, k := range []string{"OTEL_SDK_DISABLED", "OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
		"OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_TRACES_SAMPLER"} {
		t.Setenv(k, "")
	}
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", recv.URL)
	var out, errOut bytes.Buffer
	if err := runDev(ctxT(t), []string{"--store", storeURL(t), "--ui", "off"}, &out, &errOut); err != nil {
		t.Fatalf("dev: %v\n%s%s", err, out.String(), errOut.String())
	}
	mu.Lock()
	defer mu.Unlock()
	for _, want := range []string{"run greet", "run charge-order", "run sync-inventory", "step charge"} {
		if !slices.Contains(names, want) {
			t.Errorf("the receiver got no span %q (got %d spans)", want, len(names))
		}
	}
}
