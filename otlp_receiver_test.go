package trellis_test

import (
	"compress/gzip"
	"context"
	"encoding/hex"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// otlpReceiver is an OTLP trace receiver for tests: it decodes the export
// requests an exporter sends (OTLP/HTTP protobuf, or gRPC) and keeps the spans.
type otlpReceiver struct {
	mu       sync.Mutex
	spans    []*receivedSpan
	requests int
}

// receivedSpan is an exported span with its resource's service.name.
type receivedSpan struct {
	*tracepb.Span
	Service string
}

func (s *receivedSpan) traceID() string  { return hex.EncodeToString(s.TraceId) }
func (s *receivedSpan) spanID() string   { return hex.EncodeToString(s.SpanId) }
func (s *receivedSpan) parentID() string { return hex.EncodeToString(s.ParentSpanId) }

// attr returns the string form of attribute key ("" without it).
func (s *receivedSpan) attr(key string) string {
	for _, kv := range s.Attributes {
		if kv.Key == key {
			return anyValueString(kv.Value)
		}
	}
	return ""
}

func anyValueString(v *commonpb.AnyValue) string {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case *commonpb.AnyValue_IntValue:
		return strconv.FormatInt(x.IntValue, 10)
	}
	return ""
}

func (r *otlpReceiver) add(req *coltracepb.ExportTraceServiceRequest) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.requests++
	for _, rs := range req.ResourceSpans {
		service := ""
		for _, kv := range rs.GetResource().GetAttributes() {
			if kv.Key == "service.name" {
				service = anyValueString(kv.Value)
			}
		}
		for _, ss := range rs.ScopeSpans {
			for _, sp := range ss.Spans {
				r.spans = append(r.spans, &receivedSpan{Span: sp, Service: service})
			}
		}
	}
}

// named returns the spans received with name.
func (r *otlpReceiver) named(name string) []*receivedSpan {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*receivedSpan
	for _, s := range r.spans {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}

// newOTLPHTTPReceiver serves OTLP/HTTP (POST /v1/traces, protobuf) and returns
// its base URL, for OTEL_EXPORTER_OTLP_ENDPOINT.
func newOTLPHTTPReceiver(t *testing.T) (*otlpReceiver, string) {
	t.Helper()
	r := &otlpReceiver{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method != http.MethodPost || req.URL.Path != "/v1/traces" || req.Header.Get("Content-Type") != "application/x-protobuf" {
			http.Error(w, "want POST /v1/traces application/x-protobuf", http.StatusBadRequest)
			return
		}
		var body io.Reader = req.Body
		if req.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(req.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			body = zr
		}
		b, err := io.ReadAll(body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var msg coltracepb.ExportTraceServiceRequest
		if err := proto.Unmarshal(b, &msg); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.add(&msg)
		out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
	}))
	t.Cleanup(srv.Close)
	return r, srv.URL
}

// grpcTraceService is the receiver's gRPC trace service.
type grpcTraceService struct {
	coltracepb.UnimplementedTraceServiceServer
	r *otlpReceiver
}

func (s grpcTraceService) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	s.r.add(req)
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

// newOTLPGRPCReceiver serves OTLP over gRPC (cleartext) and returns its
// http:// URL, for OTEL_EXPORTER_OTLP_ENDPOINT.
func newOTLPGRPCReceiver(t *testing.T) (*otlpReceiver, string) {
	t.Helper()
	r := &otlpReceiver{}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(gs, grpcTraceService{r: r})
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = gs.Serve(ln)
	}()
	t.Cleanup(func() {
		gs.Stop()
		<-done
	})
	return r, "http://" + ln.Addr().String()
}
