package main

import (
	"context"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/netip"
	neturl "net/url"
	"os"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/trellis-dev/trellis"
	"github.com/trellis-dev/trellis/server"
	"github.com/trellis-dev/trellis/store"
	"github.com/trellis-dev/trellis/store/storesqlite"
	"go.opentelemetry.io/otel/trace"
)

const serverAbout = `Serve the HTTP API of a store (docs/http-api.md) on one port: start, inspect
and steer runs from any language. The server never runs workflow code; workers
elsewhere run the runs it starts. GET /healthz and /readyz answer without a
token; the OpenAPI document is at /v1/openapi.json. GET /metrics serves
Prometheus metrics to a token with role reader on every namespace ("*").
Traces are exported over OTLP when OTEL_EXPORTER_OTLP_ENDPOINT (or
OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) is set: over HTTP, or gRPC with
OTEL_EXPORTER_OTLP_PROTOCOL=grpc; OTEL_TRACES_EXPORTER=none turns them off
(docs/observability.md).

Authentication: every request needs a bearer token (Authorization: Bearer ...)
whose grants allow it (docs/http-api.md). On its first start with no tokens the
server creates an admin token and writes its secret to a new file of mode 0600
(--admin-token-file; by default beside a SQLite store's file, else
trellis-admin-token in the working directory), whose path it prints; make
others with "trellis tokens create". --insecure turns authentication off (every
request acts as an admin) and is refused unless --listen is a loopback address;
it answers only requests to a loopback name (localhost, 127.0.0.1, [::1]),
refuses a change a web page could send (cross-site, or without Content-Type:
application/json) and makes no tokens (docs/security.md, "Dev mode").

TLS: --tls-cert and --tls-key serve HTTPS (HTTP/2 included, for gRPC workers);
SIGHUP reloads them (a failed reload keeps the old pair and logs why).
--client-ca turns on mutual TLS: a client certificate, when presented, must be
signed by that CA, and without a bearer token it acts as the token created
with its subject (trellis tokens create --subject 'CN=w1,O=team').

Caps per principal: a token's principal may make --principal-rate requests a
second (bursts of --principal-burst) and hold --principal-streams streams open
(SSE, Claim, Subscribe); beyond, 429 rate_limited with Retry-After. A revoked
token's open streams end within a second on every server of the store. Behind
a reverse proxy that terminates TLS, name it with --trusted-proxy so that its
X-Forwarded-Proto and X-Forwarded-For count: cookies Secure, HSTS.

Logs: a line per request on stderr (the access log: route, status, duration,
principal, request ID, source; never a token or a payload), unless
--access-log=false. Every change a principal asks for is recorded in the
store's audit log: "trellis audit list", GET /v1/audit (docs/security.md).

Routes: --route NS=URL keeps namespace NS (its runs, queues, schedules,
workers and idempotency keys) in the store at URL; every other namespace, and
the tokens, keys, sessions and audit log, stay in the --store store (the
control store). Repeat it for each namespace; --route default=URL names the
control store instead of --store. Every server of a deployment takes the same
routes (docs/operations.md, "Routing namespaces").

Schedules: the server runs a scheduler (docs/schedules.md). Among all servers
and embedded workers on a store, one at a time holds the scheduler lease and
fires the schedules; --scheduler-lease bounds how long a dead leader holds it.

SIGTERM or Ctrl-C stops it gracefully: it stops accepting connections, answers
long polls at once, lets requests in flight finish (up to 30s) and exits.`

// serverGCPercent is the server's GOGC when the environment sets none. The
// server's live heap is small (a few tens of MB: the SQLite page cache lives
// outside it), so Go's default of 100 collects it many times a second under
// load, and collection took about a tenth of the CPU of server and worker
// together in the w1 benchmark. At 400 the heap may grow to five times the
// live heap between collections instead of twice. GOGC (and GOMEMLIMIT) in the
// environment still rule. See docs/http-api.md, "Limits and timeouts".
const serverGCPercent = 400

// serverWALPreallocate is the SQLite store's wal_preallocate when the URL
// sets none: the WAL's default limit, the size it reaches under load anyway,
// written ahead at startup so that commits do not grow the file from the first
// one on (storesqlite.Config.WALPreallocate; docs/storage.md).
const serverWALPreallocate = storesqlite.DefaultWALLimit

// withWALPreallocate adds wal_preallocate to a SQLite store URL that sets
// none; other URLs are returned as they are.
func withWALPreallocate(raw string) string {
	if !strings.HasPrefix(raw, "sqlite:") || strings.Contains(raw, "wal_preallocate=") {
		return raw
	}
	sep := "?"
	if strings.Contains(raw, "?") {
		sep = "&"
	}
	return raw + sep + "wal_preallocate=" + strconv.Itoa(serverWALPreallocate)
}

// withStoreParam adds a parameter to a store URL (the server's --blobs and
// --blob-threshold); "" leaves the URL as it is. A URL that sets it already
// is refused: the flag and the URL would disagree.
func withStoreParam(raw, name, value string) (string, error) {
	if value == "" {
		return raw, nil
	}
	if strings.Contains(raw, "?"+name+"=") || strings.Contains(raw, "&"+name+"=") {
		return "", fmt.Errorf("the store URL sets %s already; give it there or as the flag, not both", name)
	}
	sep := "?"
	if strings.Contains(raw, "?") {
		sep = "&"
	}
	return raw + sep + name + "=" + neturl.QueryEscape(value), nil
}

// serverShutdownGrace bounds how long a stopping server waits for requests in flight.
const serverShutdownGrace = 30 * time.Second

// runServer serves the HTTP API until ctx ends (SIGTERM, Ctrl-C).
func runServer(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("server", "server [--store URL] [--route NS=URL ...] [--listen ADDR] [--insecure] [--tls-cert FILE --tls-key FILE [--client-ca FILE]]", serverAbout, stderr)
	var url, listen, cpuProfile, pprofAddr, tokenFile string
	var insecure, noScheduler, requireKey bool
	accessLog := true
	var sched server.SchedulerConfig
	var limits serverLimits
	var tlsCfg serverTLSFlags
	fs.StringVar(&url, "store", "", "store `URL` (default $"+envStore+", else "+server.DefaultStore+")")
	var routes routesFlag
	fs.Var(&routes, "route", "keep a namespace's runs in another store, `NS=URL` (repeatable; default=URL names the --store store; docs/operations.md)")
	fs.StringVar(&listen, "listen", server.DefaultListen, "the `address` to listen on")
	fs.BoolVar(&insecure, "insecure", false, "turn authentication off (loopback addresses only)")
	fs.StringVar(&tokenFile, "admin-token-file", "", "on a first start, write the admin token's secret to this new `file` (mode 0600; default: beside a SQLite store's file, else ./trellis-admin-token)")
	tlsCfg.add(fs)
	fs.BoolVar(&noScheduler, "no-scheduler", false, "never fire schedules from this server (others on the store do)")
	fs.BoolVar(&requireKey, "require-idempotency-key", false, "refuse a mutating request without an Idempotency-Key header (400), on every route that takes one")
	fs.BoolVar(&accessLog, "access-log", true, "write a line per request on stderr (--access-log=false: warnings and errors only)")
	fs.DurationVar(&sched.LeaseDuration, "scheduler-lease", 0, "how long the scheduler lease lasts unrenewed, hence how soon another server takes over (default 10s)")
	fs.DurationVar(&sched.Interval, "scheduler-interval", 0, "how often the scheduler renews its lease and fires due ticks (default 1s, at most half the lease)")
	fs.StringVar(&cpuProfile, "cpuprofile", "", "write a CPU profile of the server, from its start to its stop, to this `file` (off by default; for benchmarks)")
	fs.StringVar(&pprofAddr, "pprof", "", "serve net/http/pprof on this loopback `address` (off by default; for profiling)")
	var blobsURL, blobThreshold string
	fs.StringVar(&blobsURL, "blobs", "", "keep payloads above the threshold in this S3-compatible object store, `s3://bucket/prefix?endpoint=host:port&...` (default: a table of the store; docs/payloads.md)")
	fs.StringVar(&blobThreshold, "blob-threshold", "", "store payloads above this many `bytes` apart from their rows (default 262144)")
	fs.IntVar(&limits.maxPayload, "max-payload", 0, fmt.Sprintf("the largest payload (input, output, step result, event) the server takes, in `bytes`; request and worker message limits follow it (default %d)", trellis.DefaultMaxPayloadBytes))
	limits.flags(fs)
	pos, err := parseArgs(fs, args)
	switch {
	case err != nil:
		return err
	case len(pos) > 0:
		return usagef(fs, "server: unexpected argument %q", pos[0])
	case (tlsCfg.cert == "") != (tlsCfg.key == ""):
		return usagef(fs, "server: --tls-cert and --tls-key go together")
	case tlsCfg.clientCA != "" && tlsCfg.cert == "":
		return usagef(fs, "server: --client-ca needs --tls-cert and --tls-key (mutual TLS is TLS)")
	case limits.maxPayload < 0:
		return usagef(fs, "server: --max-payload %d: must be a positive number of bytes", limits.maxPayload)
	case routes.control != "" && url != "":
		return usagef(fs, "server: --route default=URL names the store of --store: give one of them")
	}
	if routes.control != "" {
		url = routes.control
	}
	stopPprof, err := startPprof(pprofAddr)
	if err != nil {
		return usagef(fs, "server: %v", err)
	}
	defer stopPprof()
	stopProfile, err := startProfiles(cpuProfile, "")
	if err != nil {
		return fmt.Errorf("server: --cpuprofile: %w", err)
	}
	defer stopProfile()
	if _, set := os.LookupEnv("GOGC"); !set {
		debug.SetGCPercent(serverGCPercent)
	}
	if url == "" {
		url = os.Getenv(envStore)
	}
	if url == "" {
		url = server.DefaultStore
	}
	url = withWALPreallocate(url)
	for ns, u := range routes.routes {
		routes.routes[ns] = withWALPreallocate(u)
	}
	if url, err = withStoreParam(url, "blobs", blobsURL); err != nil {
		return usagef(fs, "server: --blobs: %v", err)
	}
	if url, err = withStoreParam(url, "blob_threshold", blobThreshold); err != nil {
		return usagef(fs, "server: --blob-threshold: %v", err)
	}
	// Tracing is on when the standard OTEL_* variables name an OTLP endpoint.
	tp, stopTracing, err := tracingFromEnv(ctx)
	if err != nil {
		return err
	}
	defer stopTracing()
	sched.Disabled = noScheduler
	uiKey, err := uiKeyFromEnv()
	if err != nil {
		return usagef(fs, "server: %v", err)
	}
	logger, closeLog := serverLogger(stderr, accessLog)
	defer closeLog()
	cfg := server.Config{Store: url, Routes: routes.routes, Listen: listen, Insecure: insecure, Scheduler: sched, UIKey: uiKey,
		TracerProvider: tp, Logger: logger, DisableAccessLog: !accessLog, RequireIdempotencyKey: requireKey,
		TLSCertFile: tlsCfg.cert, TLSKeyFile: tlsCfg.key, ClientCAFile: tlsCfg.clientCA}
	limits.apply(&cfg)
	srv, err := server.New(ctx, cfg)
	if err != nil {
		return err
	}
	if !insecure {
		if tokenFile == "" {
			tokenFile = defaultAdminTokenFile(url)
		}
		created, err := srv.BootstrapAdminFile(ctx, tokenFile)
		if err != nil {
			return errors.Join(err, srv.Shutdown(context.Background()))
		}
		if created {
			fmt.Fprintf(stdout, "created the first admin token (admin:*); its secret is in %s (mode 0600): TOKEN=$(cat %s)\n", tokenFile, tokenFile)
		}
	}
	if err := srv.Start(); err != nil {
		return errors.Join(err, srv.Shutdown(context.Background()))
	}
	stopReload := reloadTLSOnSIGHUP(srv, stdout, logger)
	defer stopReload()
	fmt.Fprintf(stdout, "trellis server listening on %s (store %s%s; %s)\n", srv.URL(), redacted(url), routes.describe(), serverMode(insecure, tlsCfg))
	fmt.Fprintf(stdout, "web UI at %s/\n", srv.URL())
	<-ctx.Done()
	fmt.Fprintln(stdout, "trellis server stopping")
	sctx, cancel := context.WithTimeout(context.Background(), serverShutdownGrace)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("stopping server: %w", err)
	}
	return nil
}

// serverLimits are the flags of the caps per principal and of the trusted
// proxies (docs/security.md).
type serverLimits struct {
	maxPayload int
	rate       float64
	burst      int
	streams    int
	workerIdle time.Duration
	proxies    proxiesFlag
	stepGrace  time.Duration
}

func (l *serverLimits) flags(fs *flag.FlagSet) {
	fs.Float64Var(&l.rate, "principal-rate", 0, fmt.Sprintf("requests a second one principal (token) may make, API and worker calls together; -1: no cap (default %d)", server.DefaultPrincipalRate))
	fs.IntVar(&l.burst, "principal-burst", 0, fmt.Sprintf("the burst of --principal-rate (default %d)", server.DefaultPrincipalBurst))
	fs.IntVar(&l.streams, "principal-streams", 0, fmt.Sprintf("streams one principal may hold open on this server: SSE, Claim and Subscribe together; -1: no cap (default %d)", server.DefaultMaxStreamsPerPrincipal))
	fs.DurationVar(&l.workerIdle, "worker-stream-idle", 0, fmt.Sprintf("end a worker's Subscribe stream that delivered nothing for this long, with a reconnect (default %s)", server.DefaultWorkerStreamIdleTimeout))
	fs.DurationVar(&l.stepGrace, "step-timeout-grace", 0, fmt.Sprintf("how long a remote worker's step may run past its timeout before the server ends its lease and has it retried elsewhere (default %s)", store.DefaultStepTimeoutGrace))
	fs.Var(&l.proxies, "trusted-proxy", "a reverse proxy's `CIDR` or address, whose X-Forwarded-Proto and X-Forwarded-For the server believes (repeatable)")
}

func (l *serverLimits) apply(cfg *server.Config) {
	cfg.PrincipalRate, cfg.PrincipalBurst, cfg.MaxStreamsPerPrincipal = l.rate, l.burst, l.streams
	cfg.MaxPayloadBytes = l.maxPayload
	cfg.WorkerStreamIdleTimeout, cfg.TrustedProxies = l.workerIdle, l.proxies
	cfg.StepTimeoutGrace = l.stepGrace
}

// proxiesFlag collects repeated --trusted-proxy CIDR flags.
type proxiesFlag []netip.Prefix

func (p *proxiesFlag) String() string { return "" }

func (p *proxiesFlag) Set(s string) error {
	pr, err := server.ParseTrustedProxy(s)
	if err != nil {
		return fmt.Errorf("%q is not a CIDR prefix (10.0.0.0/8) or an address", s)
	}
	*p = append(*p, pr)
	return nil
}

// routesFlag collects repeated --route NS=URL flags: the namespace's store.
// "default" names the control store (the server's --store), kept apart.
type routesFlag struct {
	routes  map[string]string
	control string // the URL of --route default=URL
}

func (r *routesFlag) String() string { return "" }

func (r *routesFlag) Set(v string) error {
	ns, url, ok := strings.Cut(v, "=")
	switch {
	case !ok || ns == "" || url == "":
		return fmt.Errorf("%q: want NAMESPACE=URL, such as orders=postgres://db2/trellis", v)
	case ns == store.DefaultNamespace && r.control == "":
		r.control = url
		return nil
	case ns == store.DefaultNamespace || r.routes[ns] != "":
		return fmt.Errorf("namespace %q is routed twice", ns)
	}
	if err := store.ValidateNamespace(ns); err != nil {
		return fmt.Errorf("%q: %v", v, err)
	}
	if r.routes == nil {
		r.routes = make(map[string]string)
	}
	r.routes[ns] = url
	return nil
}

// describe is the routes for the server's "listening" line, passwords hidden.
func (r *routesFlag) describe() string {
	var b strings.Builder
	for _, ns := range slices.Sorted(maps.Keys(r.routes)) {
		fmt.Fprintf(&b, "; route %s %s", ns, redacted(r.routes[ns]))
	}
	return b.String()
}

// serverMode says how the server authenticates, for its "listening" line.
func serverMode(insecure bool, t serverTLSFlags) string {
	switch {
	case insecure:
		return "insecure: no authentication"
	case t.clientCA != "":
		return "bearer tokens and client certificates"
	}
	return "bearer tokens"
}

// defaultAdminTokenFile is where the first admin token's secret goes when
// --admin-token-file is not given: beside a SQLite store's file (trellis.db:
// trellis.db.admin-token), whose directory its owner protects already; for
// another store, trellis-admin-token in the working directory.
func defaultAdminTokenFile(storeURL string) string {
	if strings.HasPrefix(storeURL, "sqlite:") {
		if cfg, err := storesqlite.ParseURL(storeURL); err == nil && cfg.Path != "" && !strings.HasPrefix(cfg.Path, ":memory:") {
			return cfg.Path + ".admin-token"
		}
	}
	return "trellis-admin-token"
}

// serverLogger is the log of a server this command runs, as text lines on
// stderr: warnings and errors (a request that failed inside the server, a
// handler's panic, why /readyz answers 503, the scheduler's and the purgers'
// troubles) and, with accessLog, the Info lines too: the access log (a line
// per request, docs/observability.md) and the scheduler's changes of leader.
// The server's library default discards them.
func serverLogger(stderr io.Writer, accessLog bool) (*slog.Logger, func() error) {
	level := slog.LevelWarn
	if accessLog {
		level = slog.LevelInfo
	}
	buf := newLogBuffer(stderr)
	return slog.New(flushingHandler{slog.NewTextHandler(buf, &slog.HandlerOptions{Level: level}), buf}), buf.Close
}

// redacted hides a password in a store URL.
func redacted(s string) string {
	u, err := neturl.Parse(s)
	if err != nil {
		return "(malformed URL)"
	}
	return u.Redacted()
}

// envUIKey names the variable holding the web UI's key: 64 hex digits, the same
// on every server behind one address (docs/ui.md).
const envUIKey = "TRELLIS_UI_KEY"

// uiKeyFromEnv reads the web UI's key; nil when unset (a key per process).
func uiKeyFromEnv() ([]byte, error) {
	v := strings.TrimSpace(os.Getenv(envUIKey))
	if v == "" {
		return nil, nil
	}
	k, err := hex.DecodeString(v)
	if err != nil || len(k) != server.UIKeySize {
		return nil, fmt.Errorf("%s must be %d hex digits (openssl rand -hex %d)", envUIKey, 2*server.UIKeySize, server.UIKeySize)
	}
	return k, nil
}

// tracingFromEnv is trellis.TracerFromEnv for a command: stop flushes the last
// spans, waiting up to 5 s.
func tracingFromEnv(ctx context.Context) (tp trace.TracerProvider, stop func(), err error) {
	tp, shutdown, err := trellis.TracerFromEnv(ctx)
	if err != nil {
		return nil, nil, err
	}
	return tp, func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = shutdown(sctx)
	}, nil
}
