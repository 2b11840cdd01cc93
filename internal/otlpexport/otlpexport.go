// Package otlpexport is the seam between package trellis and the OTLP trace
// exporters: trellis.TracerFromEnv reads the OTEL_* variables, and the
// exporter of the protocol they name comes from package
// github.com/trellis-dev/trellis/otlp, which registers itself here when a
// program imports it. OpenTelemetry's OTLP exporters, over HTTP as over gRPC,
// link gRPC (the collector's generated service code), so package trellis does
// not import them: a program that does not export traces does not link gRPC.
package otlpexport

import (
	"context"
	"sync"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// Import is the import that registers the exporters, for error messages.
const Import = `import _ "github.com/trellis-dev/trellis/otlp"`

// NewFunc makes an exporter that reads its endpoint, headers and the rest
// from the environment.
type NewFunc func(ctx context.Context) (sdktrace.SpanExporter, error)

var (
	mu     sync.RWMutex
	byName = map[string]NewFunc{}
)

// Register makes fn the exporter of an OTLP protocol ("http/protobuf",
// "grpc"). It panics when the protocol is registered twice or fn is nil: a
// programming error.
func Register(protocol string, fn NewFunc) {
	if fn == nil {
		panic("otlpexport.Register: nil NewFunc for " + protocol)
	}
	mu.Lock()
	defer mu.Unlock()
	if _, dup := byName[protocol]; dup {
		panic("otlpexport.Register: protocol " + protocol + " registered twice")
	}
	byName[protocol] = fn
}

// Lookup returns the exporter of a protocol; nil when none is registered.
func Lookup(protocol string) NewFunc {
	mu.RLock()
	defer mu.RUnlock()
	return byName[protocol]
}
