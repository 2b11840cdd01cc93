package server

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"time"
)

// Every request gets an ID, answered in RequestIDHeader and written in its
// access log line, in the audit entry of a change it made, and in the problem
// document of an error: one ID finds a request in all three. The access log is
// a line per request on Config.Logger, at level Info (docs/observability.md,
// "Access log").

// RequestIDHeader answers the ID the server gave the request.
const RequestIDHeader = "X-Request-Id"

// requestInfo is what the layers of one request learn for its access log line
// and its audit entry: the front sets the ID, authenticate the principal.
type requestInfo struct {
	id        string
	principal string
	source    string // clientAddr: the caller's address, through trusted proxies
}

type requestInfoKey struct{}

// requestInfoOf returns the request's info (nil outside a request of front).
func requestInfoOf(ctx context.Context) *requestInfo {
	ri, _ := ctx.Value(requestInfoKey{}).(*requestInfo)
	return ri
}

// notePrincipal records the principal a request authenticated as.
func notePrincipal(ctx context.Context, name string) {
	if ri := requestInfoOf(ctx); ri != nil {
		ri.principal = name
	}
}

// newRequestID returns a request's ID: 96 bits in hex, unique among the
// requests of a store's servers.
func newRequestID() string {
	var b [12]byte
	copy(b[:4], requestIDPrefix[:])
	binary.BigEndian.PutUint64(b[4:], requestIDs.Add(1)^requestIDMask)
	return hex.EncodeToString(b[:])
}

// A request ID is this process's random prefix and a counter masked by a
// random value: unique among a store's servers (32 random bits a process, and
// a counter that does not repeat), without a read of the system's random
// source per request. It is an identifier, not a secret.
var (
	requestIDPrefix [4]byte
	requestIDMask   uint64
	requestIDs      atomic.Uint64
)

func init() {
	var b [12]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand since Go 1.24)
	copy(requestIDPrefix[:], b[:4])
	requestIDMask = binary.BigEndian.Uint64(b[4:])
}

// front wraps the server's whole handler: it gives the request its ID and, when
// the request is done, writes its access log line. A request the server hands
// to itself (the UI's stream, served by the API's route) keeps its ID and gets
// one line.
func (s *Server) front(next http.Handler) http.Handler {
	logs := !s.cfg.DisableAccessLog
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if requestInfoOf(r.Context()) != nil {
			next.ServeHTTP(w, r)
			return
		}
		t0 := time.Now()
		ri := &requestInfo{id: newRequestID(), source: s.clientAddr(r)}
		w.Header().Set(RequestIDHeader, ri.id)
		r = r.WithContext(context.WithValue(r.Context(), requestInfoKey{}, ri))
		if !logs || !s.cfg.Logger.Enabled(r.Context(), slog.LevelInfo) { // no line: no counting writer
			next.ServeHTTP(w, r)
			return
		}
		aw := &accessWriter{ResponseWriter: w}
		next.ServeHTTP(aw, r)
		s.logAccess(r, ri, aw, time.Since(t0))
	})
}

// logAccess writes the access log line of a request: no query string, no
// header, no body, so no secret and no payload. route is the pattern the
// request matched, not its path (IDs stay out); a worker call's is its
// procedure; "/" is no route at all.
func (s *Server) logAccess(r *http.Request, ri *requestInfo, aw *accessWriter, took time.Duration) {
	ctx := r.Context()
	if !s.cfg.Logger.Enabled(ctx, slog.LevelInfo) {
		return
	}
	route := r.Pattern
	if _, p, ok := strings.Cut(route, " "); ok {
		route = p // "METHOD /path": the method is logged apart
	}
	if route == s.workerPath {
		route = r.URL.Path // the procedure: /trellis.worker.v1.WorkerService/Checkpoint
	}
	status := aw.code
	if status == 0 {
		status = http.StatusOK // nothing written, or a stream that took its connection over
	}
	attrs := []slog.Attr{
		slog.String("method", r.Method), slog.String("route", route), slog.Int("status", status),
		slog.Duration("duration", took), slog.Int64("bytes", aw.bytes), slog.String("request_id", ri.id),
		slog.String("source", ri.source), // through trusted proxies (proxy.go)
	}
	if ns := r.PathValue("ns"); ns != "" {
		attrs = append(attrs, slog.String("namespace", ns))
	}
	if ri.principal != "" {
		attrs = append(attrs, slog.String("principal", ri.principal))
	}
	s.cfg.Logger.LogAttrs(ctx, slog.LevelInfo, "request", attrs...)
}

// accessWriter records the status and the body bytes of a response. It lets
// http.ResponseController reach the writer it wraps (flushes, deadlines, a
// stream taking its connection over).
type accessWriter struct {
	http.ResponseWriter
	code  int
	bytes int64
}

func (w *accessWriter) WriteHeader(code int) {
	if w.code == 0 && code >= 200 { // not an informational answer (103)
		w.code = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *accessWriter) Write(b []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(b)
	w.bytes += int64(n)
	return n, err
}

// Flush implements http.Flusher for handlers that test for it (the worker
// protocol's streams).
func (w *accessWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap is for http.ResponseController.
func (w *accessWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
