package server

import (
	"errors"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// apiMetrics are the metrics of the API: requests by route (its operation ID)
// and status code, and their latency by route.
type apiMetrics struct {
	requests *prometheus.CounterVec   // route, code
	seconds  *prometheus.HistogramVec // route
	handoffs prometheus.Counter       // runs created claimed for a waiting remote worker
}

func newAPIMetrics(reg prometheus.Registerer) (*apiMetrics, error) {
	m := &apiMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "trellis_api_requests_total",
			Help: "API requests by route (operation ID) and status code."}, []string{"route", "code"}),
		seconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "trellis_api_request_duration_seconds",
			Help:    "Latency of API requests by route (operation ID); long polls and streams included.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}}, []string{"route"}),
		handoffs: prometheus.NewCounter(prometheus.CounterOpts{Name: "trellis_server_handoffs_total",
			Help: "Runs started through this server's API and created claimed for a remote worker whose claim stream waited with a free slot."}),
	}
	var err error
	if m.requests, err = register(reg, m.requests); err != nil {
		return nil, err
	}
	if m.seconds, err = register(reg, m.seconds); err != nil {
		return nil, err
	}
	if m.handoffs, err = register(reg, m.handoffs); err != nil {
		return nil, err
	}
	return m, nil
}

// register registers c on reg, or returns the collector of the same
// description already there: the metrics of a server that stopped (or failed
// to Start, as trellis dev's first try on a port another process holds) stay
// registered on the caller's Metrics, and a later server on the same Metrics
// counts on from them instead of failing with a duplicate registration.
func register[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	err := reg.Register(c)
	var dup prometheus.AlreadyRegisteredError
	if errors.As(err, &dup) {
		if existing, ok := dup.ExistingCollector.(C); ok {
			return existing, nil
		}
	}
	return c, err
}

// routeObserver holds the metric children of one route, so that a request
// looks up no label values but its status code's, once per code.
type routeObserver struct {
	m       *apiMetrics
	op      string
	seconds prometheus.Observer
	codes   sync.Map // int -> prometheus.Counter
	tracer  trace.Tracer
}

func (m *apiMetrics) route(op string, tp trace.TracerProvider) *routeObserver {
	o := &routeObserver{m: m, op: op, seconds: m.seconds.WithLabelValues(op)}
	if tp != nil {
		o.tracer = tp.Tracer("github.com/trellis-dev/trellis/server")
	}
	return o
}

func (o *routeObserver) done(code int, elapsed time.Duration) {
	o.seconds.Observe(elapsed.Seconds())
	c, ok := o.codes.Load(code)
	if !ok {
		c, _ = o.codes.LoadOrStore(code, o.m.requests.WithLabelValues(o.op, strconv.Itoa(code)))
	}
	c.(prometheus.Counter).Inc()
}

var traceContext propagation.TraceContext

// observe wraps a route's handler: it joins the caller's trace (a W3C
// traceparent header), so that a run started by the request is a child of the
// caller's span, opens a server span when tracing is on, and counts the request.
func (o *routeObserver) observe(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t0 := time.Now()
		if r.Header.Get("traceparent") != "" {
			r = r.WithContext(traceContext.Extract(r.Context(), propagation.HeaderCarrier(r.Header)))
		}
		var span trace.Span
		if o.tracer != nil {
			ctx, sp := o.tracer.Start(r.Context(), o.op, trace.WithSpanKind(trace.SpanKindServer),
				trace.WithAttributes(attribute.String("http.request.method", r.Method), attribute.String("http.route", r.Pattern)))
			r, span = r.WithContext(ctx), sp
		}
		sw := &statusWriter{ResponseWriter: w}
		next.ServeHTTP(sw, r)
		code := sw.code
		if code == 0 {
			code = http.StatusOK
		}
		if span != nil {
			span.SetAttributes(attribute.Int("http.response.status_code", code))
			if code >= 500 {
				span.SetStatus(codes.Error, http.StatusText(code))
			}
			span.End()
		}
		o.done(code, time.Since(t0))
	})
}

// statusWriter records the status code of a response. It lets
// http.ResponseController reach the writer it wraps (flushes of streams).
type statusWriter struct {
	http.ResponseWriter
	code int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Flush implements http.Flusher for handlers that test for it.
func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap is for http.ResponseController.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// metrics serves the Prometheus metrics of the server: its API, its clients
// and its store (GET /metrics, role reader on every namespace).
func (s *Server) metrics(w http.ResponseWriter, r *http.Request, _ *call) error {
	s.cfg.Metrics.Handler().ServeHTTP(w, r)
	return nil
}
