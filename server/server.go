// Package server is `trellis server`: the public HTTP API of a Trellis store, for
// callers in any language (docs/http-api.md). The server coordinates and never
// runs workflow code: its clients have their workers disabled, and workers
// elsewhere run the runs it starts. It keeps no state another server needs, so
// many servers may serve one Postgres store.
package server

import (
	"context"
	"crypto/cipher"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"time"

	servercore "github.com/trellis-dev/trellis/internal/core"

	"go.opentelemetry.io/otel/trace"

	"github.com/trellis-dev/trellis"
	"github.com/trellis-dev/trellis/internal/auth"
	"github.com/trellis-dev/trellis/internal/auth/storeauth"
	"github.com/trellis-dev/trellis/internal/clock"
	"github.com/trellis-dev/trellis/internal/queuedefaults"
	"github.com/trellis-dev/trellis/internal/secrets"
	"github.com/trellis-dev/trellis/internal/servermetrics"
	"github.com/trellis-dev/trellis/store"
)

// Defaults of Config.
const (
	DefaultListen       = "127.0.0.1:7070"
	DefaultStore        = "sqlite:trellis.db"
	DefaultMaxBodyBytes = int64(trellis.DefaultMaxPayloadBytes) + 64<<10
	DefaultMaxWait      = time.Minute
	// DefaultIdempotencyPurgeInterval is how often expired idempotency keys are purged.
	DefaultIdempotencyPurgeInterval = 5 * time.Minute
)

// Config configures New. Zero fields take the documented defaults.
type Config struct {
	// Store is the store URL (see trellis.Config.Store); default DefaultStore.
	Store string
	// Backend, when set, is used instead of opening Store; Shutdown does not close it.
	Backend store.Store
	// Routes maps namespaces to the URLs of the stores that hold them
	// (--route NS=URL; docs/operations.md, "Routing namespaces"): the server
	// opens each (one per distinct URL) and serves every namespace from its
	// store, and everything else (unrouted namespaces, tokens, keys, sessions,
	// the audit log) from Store or Backend, the control store
	// (store/storeroute). A route of the default or the system namespace is an
	// error. Shutdown closes the stores it opened.
	Routes map[string]string
	// Listen is the address Start listens on; default DefaultListen.
	Listen string
	// Authenticator finds the principal of each request's bearer token; default
	// the store's tokens (trellis tokens create; Server.BootstrapAdmin makes the
	// first).
	Authenticator auth.Authenticator
	// Insecure turns authentication off: every request acts as an admin of every
	// namespace. Refused unless Listen is a loopback address. The server then
	// answers only requests to a loopback Host, refuses state-changing requests
	// a web page could send (cross-site, or without a JSON, Connect or gRPC
	// content type) and makes no tokens (devmode.go).
	Insecure bool
	// TLSCertFile and TLSKeyFile, set together, make Start serve HTTPS (HTTP/2
	// included, for gRPC workers) with this PEM certificate chain and key.
	// ReloadTLS reads them again (`trellis server` does on SIGHUP).
	TLSCertFile, TLSKeyFile string
	// ClientCAFile, with TLSCertFile, turns on mutual TLS: a client certificate,
	// when presented, must be signed by a CA of this PEM file (else the
	// handshake fails), and a request without a bearer token then acts as the
	// live token whose subject is the certificate's (store.Token.Subject); a
	// bearer token, when sent, wins. Needs an Authenticator that maps subjects
	// (auth.SubjectAuthenticator; the default does).
	ClientCAFile string
	// MaxPayloadBytes caps a payload (a run's input or output, a step's
	// result, an event's payload; docs/payloads.md) the server's API and
	// clients take: their trellis.Config.MaxPayloadBytes. Default
	// trellis.DefaultMaxPayloadBytes. Queues may set lower limits.
	MaxPayloadBytes int
	// MaxBodyBytes caps a request body; default MaxPayloadBytes and 64 KiB
	// (a maximal payload and its envelope).
	MaxBodyBytes int64
	// MaxWorkerMessageBytes caps one message of the worker protocol (connect
	// ReadMaxBytes), e.g. a batch of checkpoints; default 4 × MaxBodyBytes
	// (DefaultMaxWorkerMessageBytes with the default payload limit): a final
	// checkpoint may carry the last step's result, the output and the final
	// stream event that repeats it.
	MaxWorkerMessageBytes int64
	// WorkerStreamWriteTimeout bounds each write of the worker protocol's long
	// streams (Claim, Subscribe): a worker that stops reading is cut off after
	// it, and its stream's goroutine ends. An idle stream is not limited.
	// Default 30s.
	WorkerStreamWriteTimeout time.Duration
	// MaxWait caps the wait of a long poll (result?wait=); default DefaultMaxWait.
	MaxWait time.Duration
	// MaxInFlight caps the API requests handled at once; one more is answered
	// 429 rate_limited with Retry-After at once. Default 4096. Health checks are
	// not counted.
	MaxInFlight int
	// ReadHeaderTimeout, ReadTimeout and IdleTimeout bound slow clients; defaults
	// 5s, 30s and 2m. The write timeout is MaxWait plus 30s, for long polls.
	ReadHeaderTimeout time.Duration
	ReadTimeout       time.Duration
	IdleTimeout       time.Duration
	// RequireIdempotencyKey refuses a request without an Idempotency-Key
	// header (400 invalid_argument, naming the header) on every route that
	// takes one (every mutating route but the token routes, route.takesKey),
	// so that no change can be applied twice by a client's retry. The Go
	// client, the CLI and the bench always send one.
	RequireIdempotencyKey bool
	// IdempotencyPurgeInterval is how often the server deletes the idempotency
	// keys that expired (store.IdempotencyTTL), in batches of
	// idempotencyPurgeBatch until none is left, and the records of signed-out
	// UI sessions past their expiry (ui_signout.go); default
	// DefaultIdempotencyPurgeInterval. Negative: never (another process purges).
	IdempotencyPurgeInterval time.Duration
	// MaxStreams caps the streams (GET .../stream) open at once; one more is
	// answered 429 rate_limited. Streams do not count in MaxInFlight. Default
	// 20000.
	MaxStreams int
	// MaxStreamsPerPrincipal caps the long streams one principal (a token's
	// name) holds open on this server: SSE streams (the API's and the UI's)
	// and the worker protocol's Claim and Subscribe streams together. One
	// more is answered 429 rate_limited with Retry-After (resource_exhausted
	// on the worker protocol). Default DefaultMaxStreamsPerPrincipal;
	// negative: no cap. Not applied under Insecure (see limits.go).
	MaxStreamsPerPrincipal int
	// PrincipalRate caps the requests a second of one principal on this
	// server, in bursts of up to PrincipalBurst (a token bucket): API and UI
	// requests, stream opens and worker protocol calls alike. One more is
	// answered 429 rate_limited with Retry-After (resource_exhausted on the
	// worker protocol). Defaults DefaultPrincipalRate and
	// DefaultPrincipalBurst; a negative PrincipalRate: no cap. Not applied
	// under Insecure.
	PrincipalRate  float64
	PrincipalBurst int
	// StreamAuthInterval is how often the credentials of the open streams are
	// authenticated again, to end those of a revoked token (streamreg.go);
	// default DefaultStreamAuthInterval.
	StreamAuthInterval time.Duration
	// WorkerStreamIdleTimeout ends a worker protocol Subscribe stream that
	// delivered no signal for this long, with its reconnect message (the
	// worker subscribes again); default DefaultWorkerStreamIdleTimeout.
	// (A Claim stream ends after its own wait, at most 5 minutes.)
	WorkerStreamIdleTimeout time.Duration
	// TrustedProxies are the addresses of the reverse proxies in front of the
	// server (`trellis server --trusted-proxy`): only on a connection from one
	// of them does the server believe X-Forwarded-Proto (https: Secure
	// cookies, HSTS, the scheme of the UI's Origin check) and X-Forwarded-For
	// (the client's address). See proxy.go.
	TrustedProxies []netip.Prefix
	// StreamHeartbeat is how long a stream stays silent before the server
	// writes a comment line, so that proxies keep it open; default 15s.
	StreamHeartbeat time.Duration
	// StreamProbeInterval is how often the server looks for streams whose
	// client has gone (a closed connection), to end them and free their
	// connection at once rather than at their next write; default 2s.
	StreamProbeInterval time.Duration
	// StepTimeoutGrace is how long a remote worker's step attempt may run past
	// its declared timeout, as the worker's heartbeat reports it, before the
	// server ends the run's lease (the attempt is recorded timed out and
	// another worker retries it by the step's policy; the hung worker's later
	// writes are refused). It also decides, when a lease expired while a step
	// ran, whether the attempt is recorded timed out or lost. Default
	// store.DefaultStepTimeoutGrace (15s); --step-timeout-grace.
	StepTimeoutGrace time.Duration
	// RetentionInterval is how often the server looks for finished runs past
	// their namespace's retention period and deletes them, in small batches
	// in the background (internal/retention, docs/retention.md); default
	// retention.DefaultInterval. Negative: never (another process purges).
	RetentionInterval time.Duration
	// Logger receives request errors the server could not attribute to the
	// client, warnings of its background work and, at level Info, the access
	// log: a line per request (docs/observability.md); default discards.
	Logger *slog.Logger
	// DisableAccessLog turns the access log off.
	DisableAccessLog bool
	// AuditFlushInterval is how often the server appends the audit entries
	// it buffered to the store (at once when auditFlushAt of them wait); a
	// crash of the process loses the entries of at most the last interval
	// (docs/security.md, "Audit log"). Default DefaultAuditFlushInterval.
	AuditFlushInterval time.Duration
	// AuditBuffer caps the audit entries buffered while the store does not
	// take them; beyond it entries are dropped, counted and logged. Default
	// DefaultAuditBuffer.
	AuditBuffer int
	// Scheduler configures the scheduler that Start runs (docs/schedules.md):
	// among all servers and embedded workers on a store, one leads and fires
	// the schedules.
	Scheduler SchedulerConfig

	// UIKey seals the web UI's session cookies and derives its CSRF tokens
	// (UIKeySize bytes; docs/ui.md). Servers behind one load balancer share it.
	// Default: a random key made at New, so sessions end when the process does.
	UIKey []byte

	// Metrics collects the metrics of the API, of the server's clients and of
	// its store, served at GET /metrics to principals with role reader on every
	// namespace ("*"); default a new trellis.NewMetrics(). They cover the whole
	// store from New on (internal/servermetrics), the claims the server makes for
	// its remote workers and the leases those hold through it
	// (docs/observability.md). Pass the same one to workers embedded in the
	// process to serve theirs there too.
	Metrics *trellis.Metrics
	// TracerProvider, when set, traces each API request as a server span, a
	// child of the caller's traceparent, and the client calls it makes (see
	// trellis.Config.TracerProvider). A run started by a request is joined to
	// the caller's trace whether or not it is set.
	TracerProvider trace.TracerProvider
	// Clock is the server's clock: the store it opens from Store, its clients
	// and their timers, the scheduler, the purgers, lease tracking, the
	// authenticator's caches, rate limits, sessions and the audit log read the
	// time from it and wait on its timers (network deadlines stay on the wall
	// clock). Default the wall clock. A Backend should be opened on the same
	// clock (trellis.OpenStore's now). Tests move a fake one instead of
	// sleeping.
	Clock trellis.Clock

	// purged, when set, is told the outcome of each purge pass (for tests).
	purged func(n int, err error)
}

// SchedulerConfig configures the server's scheduler.
type SchedulerConfig struct {
	// Disabled: this server never fires schedules (others on the store do).
	Disabled bool
	// Owner names this server in the scheduler lease; default host-pid-random.
	Owner string
	// LeaseDuration and Interval: see trellis.SchedulerOptions (defaults 10s, 1s).
	LeaseDuration time.Duration
	Interval      time.Duration
}

func (c Config) withDefaults() Config {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	if c.Store == "" {
		c.Store = DefaultStore
	}
	if c.Clock == nil {
		c.Clock = clock.Real{}
	}
	if c.Listen == "" {
		c.Listen = DefaultListen
	}
	if c.MaxPayloadBytes <= 0 {
		c.MaxPayloadBytes = trellis.DefaultMaxPayloadBytes
	}
	if c.MaxBodyBytes <= 0 {
		c.MaxBodyBytes = int64(c.MaxPayloadBytes) + 64<<10
	}
	if c.MaxInFlight <= 0 {
		c.MaxInFlight = 4096
	}
	if c.MaxStreams <= 0 {
		c.MaxStreams = 20000
	}
	if c.MaxStreamsPerPrincipal == 0 {
		c.MaxStreamsPerPrincipal = DefaultMaxStreamsPerPrincipal
	}
	if c.PrincipalRate == 0 {
		c.PrincipalRate = DefaultPrincipalRate
	}
	if c.PrincipalBurst <= 0 {
		c.PrincipalBurst = DefaultPrincipalBurst
	}
	def(&c.StreamAuthInterval, DefaultStreamAuthInterval)
	def(&c.WorkerStreamIdleTimeout, DefaultWorkerStreamIdleTimeout)
	def(&c.StreamHeartbeat, 15*time.Second)
	def(&c.StreamProbeInterval, 2*time.Second)
	if c.MaxWorkerMessageBytes <= 0 {
		c.MaxWorkerMessageBytes = 4 * c.MaxBodyBytes
	}
	if c.WorkerStreamWriteTimeout <= 0 {
		c.WorkerStreamWriteTimeout = 30 * time.Second
	}
	def(&c.MaxWait, DefaultMaxWait)
	def(&c.AuditFlushInterval, DefaultAuditFlushInterval)
	if c.AuditBuffer <= 0 {
		c.AuditBuffer = DefaultAuditBuffer
	}
	if c.IdempotencyPurgeInterval == 0 {
		c.IdempotencyPurgeInterval = DefaultIdempotencyPurgeInterval
	}
	def(&c.ReadHeaderTimeout, 5*time.Second)
	def(&c.ReadTimeout, 30*time.Second)
	def(&c.IdleTimeout, 2*time.Minute)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Metrics == nil {
		c.Metrics = trellis.NewMetrics()
	}
	return c
}

func (c Config) validate() error {
	switch {
	case c.Insecure && !loopbackOnly(c.Listen):
		return fmt.Errorf("server config: --insecure is refused unless listening on loopback only (listen address %q)", c.Listen)
	case (c.TLSCertFile == "") != (c.TLSKeyFile == ""):
		return errors.New("server config: TLSCertFile and TLSKeyFile go together (--tls-cert and --tls-key)")
	case c.ClientCAFile != "" && c.TLSCertFile == "":
		return errors.New("server config: ClientCAFile (--client-ca) needs TLS: set TLSCertFile and TLSKeyFile")
	case c.ClientCAFile != "" && c.Insecure:
		return errors.New("server config: ClientCAFile (--client-ca) maps certificates to tokens, and Insecure turns tokens off")
	case c.StepTimeoutGrace < 0:
		return fmt.Errorf("server config: StepTimeoutGrace (--step-timeout-grace) must not be negative, not %s", c.StepTimeoutGrace)
	}
	if err := validateRoutes(c.Routes); err != nil {
		return err
	}
	for _, p := range c.TrustedProxies {
		if !p.IsValid() {
			return fmt.Errorf("server config: TrustedProxies: %v is not a valid prefix", p)
		}
	}
	return nil
}

// loopbackOnly reports whether addr (host:port) listens on a loopback address only.
func loopbackOnly(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Server serves the HTTP API. Create it with New, then Start it, or mount Handler
// on a listener of your own.
type Server struct {
	cfg   Config
	store store.Store
	// queues fills the queue's default retry policy into the runs pushed to
	// remote workers, which cannot read queue records.
	queues    *queuedefaults.Cache
	handoffs  *handoffs // runs started here, created claimed for waiting claim streams
	ownsStore bool
	// routed are the stores of Config.Routes when the control store is
	// Config.Backend (the router would close that too): Shutdown closes them.
	routed  []store.Store
	handler http.Handler   // front(clientCert(protect(guard(mux)))): request IDs, the access log, a client certificate's subject, HSTS and dev mode (devmode.go), the request's form
	mux     *http.ServeMux // the routes
	table   []route
	// workerPath is the path prefix of the worker protocol's procedures.
	workerPath string
	http       *http.Server

	mu     sync.Mutex
	ln     net.Listener
	served chan error

	active  atomic.Int64 // requests being handled
	streams atomic.Int64 // streams open (Config.MaxStreams)
	// streamWG counts the goroutines of streams that took over their
	// connection (streamRun); Shutdown waits for them after ending them.
	streamWG sync.WaitGroup
	probe    streamProbe   // the streams on connections they took over
	inFlight chan struct{} // a slot per API request in flight (Config.MaxInFlight)
	rates    *rateLimiter  // requests a second per principal (Config.PrincipalRate)
	// streamReg is the open streams by principal and credential: their caps
	// per principal, and the end of those whose token was revoked (authLoop).
	streamReg    streamRegistry
	authLoopDone chan struct{} // closed when authLoop has stopped; nil without one

	shutdownOnce sync.Once
	shutdownErr  error

	draining     context.Context // cancelled by Shutdown: long polls answer at once
	stopDraining context.CancelFunc

	api *apiMetrics
	// observer records in Config.Metrics what only a server sees
	// (internal/servermetrics).
	observer servermetrics.Observer
	// leases counts the leases the remote workers hold through this server
	// (trellis_active_leases); stopMetrics ends the metrics' reading of the store.
	leases      *leaseCounter
	stopMetrics func()
	// histories records the runs' histories under the leases remote workers
	// write through this server, for protocol.Check (histories.go).
	histories *leaseHistories
	ui        *uiKeys       // the web UI's session and CSRF keys
	sessions  sessionChecks // the store's answers on signed-out sessions (ui_signout.go)
	tls       *tlsState     // nil without TLS
	// leaseKeys signs the lease secrets of the claims pushed to remote
	// workers, and pageAEAD seals page tokens (pagetoken.go), under keys the
	// servers of the store share (keys.go).
	leaseKeys *secrets.Leases
	pageAEAD  cipher.AEAD

	auditor *auditor // buffers and writes the audit log
	// auditRefusals keeps the audited refusals of each principal to a few a
	// second (auditRequest).
	auditRefusals *rateLimiter
	purgeDone     chan struct{} // closed when the purge loop (purgeLoop) has stopped; nil without one
	// core is the engine's core on the store (internal/core): the clients of
	// the requests, the scheduler and the purger.
	core servercore.Core
}

// New opens the store (unless Config.Backend) and builds the server.
func New(ctx context.Context, cfg Config) (*Server, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	ui, err := newUIKeys(cfg.UIKey)
	if err != nil {
		return nil, err
	}
	tlsSt, err := newTLSState(cfg)
	if err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, store: cfg.Backend, ui: ui, tls: tlsSt}
	if _, ok := cfg.Authenticator.(auth.SubjectAuthenticator); cfg.ClientCAFile != "" && cfg.Authenticator != nil && !ok {
		return nil, errors.New("server config: ClientCAFile (--client-ca) needs an Authenticator that maps certificate subjects (auth.SubjectAuthenticator)")
	}
	if s.store == nil {
		st, err := trellis.OpenStoreWith(ctx, cfg.Store, store.OpenOptions{Now: cfg.Clock.Now, Logger: cfg.Logger})
		if err != nil {
			return nil, fmt.Errorf("starting server: %w", err)
		}
		s.store, s.ownsStore = st, true
	}
	if err := s.useRoutes(ctx); err != nil {
		_ = s.closeStores()
		return nil, err
	}
	if err := s.loadKeys(ctx); err != nil {
		_ = s.closeStores()
		return nil, err
	}
	s.queues = queuedefaults.New(s.store, cfg.Logger)
	s.handoffs = &handoffs{store: s.store}
	if !cfg.Insecure && cfg.Authenticator == nil {
		s.cfg.Authenticator = storeauth.New(s.store, storeauth.Config{Now: cfg.Clock.Now,
			Gate: unknownLookups{newRateLimiter(DefaultUnknownLookupRate, DefaultUnknownLookupBurst), cfg.Clock}})
	}
	s.inFlight = make(chan struct{}, cfg.MaxInFlight)
	s.rates = newRateLimiter(cfg.PrincipalRate, cfg.PrincipalBurst)
	s.draining, s.stopDraining = context.WithCancel(context.Background())
	s.table = routeTable
	api, err := newAPIMetrics(cfg.Metrics.Registry())
	if err != nil {
		_ = s.closeStores()
		return nil, fmt.Errorf("starting server: registering API metrics: %w", err)
	}
	s.api = api
	s.observer = servermetrics.For(cfg.Metrics)
	s.auditRefusals = newRateLimiter(auditRefusalRate, auditRefusalBurst)
	if s.auditor, err = newAuditor(s.store, cfg, cfg.Metrics.Registry()); err != nil {
		_ = s.closeStores()
		return nil, fmt.Errorf("starting server: %w", err)
	}
	s.handoffs.handed = api.handoffs.Inc
	s.leases = newLeaseCounter(cfg.Clock.Now)
	s.histories = newLeaseHistories(cfg.Clock.Now)
	s.handler = s.front(s.clientCert(s.routes()))
	s.http = &http.Server{
		Handler: s.handler, ReadHeaderTimeout: cfg.ReadHeaderTimeout, ReadTimeout: cfg.ReadTimeout,
		WriteTimeout: cfg.MaxWait + 30*time.Second, IdleTimeout: cfg.IdleTimeout,
		MaxHeaderBytes: transportHeaderBytes, ErrorLog: slog.NewLogLogger(cfg.Logger.Handler(), slog.LevelWarn),
	}
	// gRPC workers speak HTTP/2, over cleartext (h2c) as well as TLS.
	s.http.Protocols = new(http.Protocols)
	s.http.Protocols.SetHTTP1(true)
	s.http.Protocols.SetUnencryptedHTTP2(true)
	if s.tls != nil {
		s.http.Protocols.SetHTTP2(true)
		s.http.TLSConfig = s.tls.serverConfig()
	}
	owner := cfg.Scheduler.Owner
	if owner == "" && !cfg.Scheduler.Disabled {
		owner = schedulerOwner()
	}
	// The purger starts now, the scheduler with Start.
	s.core, err = servercore.Open(servercore.Config{Store: s.store, MaxPayloadBytes: cfg.MaxPayloadBytes,
		Logger: cfg.Logger, Metrics: cfg.Metrics, TracerProvider: cfg.TracerProvider,
		Scheduler: !cfg.Scheduler.Disabled, Owner: owner, SchedulerLease: cfg.Scheduler.LeaseDuration,
		SchedulerInterval: cfg.Scheduler.Interval, Started: func(run *store.Run) { s.observer.ObserveStarted(run.Workflow) },
		Executing:         s.histories.isEnding,
		Pushed:            s.histories.isPushed,
		RetentionInterval: cfg.RetentionInterval, Clock: cfg.Clock})
	if err != nil {
		_ = s.closeStores()
		return nil, fmt.Errorf("starting server: %w", err)
	}
	s.auditor.start()
	if every := cfg.IdempotencyPurgeInterval; every > 0 {
		s.purgeDone = make(chan struct{})
		go s.purgeLoop(every)
	}
	if !cfg.Insecure {
		s.authLoopDone = make(chan struct{})
		go s.authLoop()
	}
	// The metrics cover the whole store from the start, not only the
	// namespaces that requests have opened a client for.
	obs := servermetrics.Store{Store: s.store, ActiveLeases: s.leases.count, Logger: cfg.Logger}
	if s.ownsStore && len(cfg.Routes) == 0 {
		obs.URL = cfg.Store
	}
	s.stopMetrics = s.observer.ObserveStore(obs)
	return s, nil
}

// Handler is the server's one handler: the API, health checks, the OpenAPI
// document and the worker protocol.
func (s *Server) Handler() http.Handler { return s.handler }

// Start listens on Config.Listen and serves in the background until Shutdown.
func (s *Server) Start() error {
	ln, err := net.Listen("tcp", s.cfg.Listen)
	if err != nil {
		return fmt.Errorf("starting server: %w", err)
	}
	s.mu.Lock()
	s.ln, s.served = ln, make(chan error, 1)
	s.mu.Unlock()
	if s.tls != nil {
		go func() { s.served <- s.http.ServeTLS(ln, "", "") }()
	} else {
		go func() { s.served <- s.http.Serve(ln) }()
	}
	s.core.StartScheduler()
	return nil
}

// schedulerOwner names this process in the scheduler lease.
func schedulerOwner() string {
	host, _ := os.Hostname()
	var b [4]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("server-%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}

// Addr is the address Start listens on (useful with port 0).
func (s *Server) Addr() net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln == nil {
		return nil
	}
	return s.ln.Addr()
}

// Shutdown stops the purge of expired idempotency keys and accepting
// connections, answers the long polls in flight at once (202, the run as it is),
// waits for the other requests in flight until ctx ends, writes the audit
// entries it buffered, then closes the clients and the store it opened.
// Later calls return the first call's error.
func (s *Server) Shutdown(ctx context.Context) error {
	s.shutdownOnce.Do(func() { s.shutdownErr = s.shutdown(ctx) })
	return s.shutdownErr
}

func (s *Server) shutdown(ctx context.Context) error {
	// First: the scheduler's lease passes to another server at once.
	schedErr := s.core.StopScheduler(ctx)
	s.stopDraining()
	if s.purgeDone != nil {
		<-s.purgeDone // stopped by stopDraining; a pass in progress ends with its batch
	}
	if s.authLoopDone != nil {
		<-s.authLoopDone // stopped by stopDraining
	}
	s.core.StopPurger()
	err := s.http.Shutdown(ctx)
	s.streamWG.Wait() // ended by stopDraining: each returns at once
	s.mu.Lock()
	served := s.served
	s.mu.Unlock()
	if served != nil {
		if serr := <-served; serr != nil && !errors.Is(serr, http.ErrServerClosed) && err == nil {
			err = serr
		}
	}
	// Every request has been answered (and its entry buffered): write them.
	if aerr := s.stopAuditor(ctx); aerr != nil && err == nil {
		err = aerr
	}
	s.core.Close()
	s.stopMetrics()
	if cerr := s.closeStores(); cerr != nil && err == nil {
		err = cerr
	}
	if err == nil && schedErr != nil {
		err = schedErr
	}
	return err
}

// stopAuditor writes the buffered audit entries within ctx or, when ctx has
// ended already (requests outlasted it), within auditLastWrite.
func (s *Server) stopAuditor(ctx context.Context) error {
	if ctx.Err() != nil {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), auditLastWrite)
		defer cancel()
	}
	err := s.auditor.stop(ctx)
	if err != nil {
		s.cfg.Logger.Error("audit log: entries lost at shutdown", "err", err)
	}
	return err
}

// auditLastWrite bounds the last write of the audit log when Shutdown's
// context has ended.
const auditLastWrite = 5 * time.Second

// client returns a client of namespace ns (validated by the caller) on the
// server's core, made for the request: a run it starts is handed to a waiting
// remote worker (handoffs). The function it returns is for the request to
// call when done with it (nothing, today).
func (s *Server) client(_ context.Context, ns string) (*trellis.Client, func(), error) {
	return s.core.Client(ns, servercore.Calls{Handoff: s.handoffs}).(*trellis.Client), func() {}, nil
}

func (s *Server) activeRequests() int64 { return s.active.Load() }

// ready reports whether the store answers and its schema is current.
func (s *Server) ready(ctx context.Context) error {
	if r, ok := s.store.(interface{ Ready(context.Context) error }); ok {
		return r.Ready(ctx)
	}
	_, err := s.store.RunList(ctx, &store.RunListParams{Namespace: "default", Limit: 1})
	return err
}

// BootstrapAdmin makes the first token of a store that has none: an admin of every
// namespace named "admin", whose secret it returns to be shown once. It returns ""
// when the store has tokens already (or had: revoked ones count).
func (s *Server) BootstrapAdmin(ctx context.Context) (string, error) {
	return storeauth.Bootstrap(ctx, s.store)
}

// BootstrapAdminFile is BootstrapAdmin that writes the secret to a new file at
// path, of mode 0600, before the token exists, and never over an existing file
// (storeauth.BootstrapFile); it reports whether it created the token. `trellis
// server` calls it on every start and prints the path, never the secret.
func (s *Server) BootstrapAdminFile(ctx context.Context, path string) (bool, error) {
	return storeauth.BootstrapFile(ctx, s.store, path)
}
