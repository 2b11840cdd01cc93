// Package otlp lets trellis.TracerFromEnv export spans over OTLP. Import it
// for its side effect in the program that calls TracerFromEnv:
//
//	import _ "github.com/trellis-dev/trellis/otlp"
//
// It registers OpenTelemetry's OTLP trace exporters for both protocols that
// OTEL_EXPORTER_OTLP_PROTOCOL (or OTEL_EXPORTER_OTLP_TRACES_PROTOCOL) names:
// "http/protobuf" (the default) and "grpc". Package trellis does not import
// them itself because they link gRPC (the OTLP exporter over HTTP as well,
// through the collector's generated service code): a program that traces
// with a TracerProvider of its own, or not at all, does not link it. Without
// this import, TracerFromEnv fails when the environment asks for OTLP export,
// with an error naming the import; with tracing off (no OTEL_* variable set)
// it needs nothing.
package otlp

import (
	"context"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/trellis-dev/trellis/internal/otlpexport"
)

func init() {
	otlpexport.Register("http/protobuf", func(ctx context.Context) (sdktrace.SpanExporter, error) {
		return otlptracehttp.New(ctx)
	})
	otlpexport.Register("grpc", func(ctx context.Context) (sdktrace.SpanExporter, error) {
		return otlptracegrpc.New(ctx)
	})
}
