package trellis

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"reflect"
	"time"

	"github.com/google/uuid"
	"github.com/trellis-dev/trellis/internal/clock"
	"github.com/trellis-dev/trellis/internal/worker"
	"github.com/trellis-dev/trellis/store"
	// The embedded default store: its driver registers "sqlite:" URLs.
	_ "github.com/trellis-dev/trellis/store/storesqlite"
	"go.opentelemetry.io/otel/trace"
)

// DefaultMaxPayloadBytes is the default limit on inputs, outputs, step results and
// run-store values.
const DefaultMaxPayloadBytes = 2 << 20

// Config configures Open. Zero fields take the documented defaults.
type Config struct {
	// Store is the store URL. Default "sqlite:trellis.db" (a file in the working
	// directory). Forms: "sqlite:///abs/path.db", "sqlite:rel/path.db", with an
	// optional "?durability=relaxed" (see docs/operations.md, "Stores and durability"); or
	// "postgres://user@host:5432/db?schema=trellis" (see docs/operations.md, "Running on Postgres"),
	// which needs the Postgres driver imported:
	// import _ "github.com/trellis-dev/trellis/store/storepg".
	Store string
	// Backend, when set, is used instead of opening Store; Close does not close it.
	Backend store.Store
	// Server, when set, is the URL of a Trellis server (`trellis server`, e.g.
	// "http://127.0.0.1:7070"): the client opens no store, and its methods call
	// the server's HTTP API with the same records and errors (docs/http-api.md,
	// "The Go client"). Open starts no worker (Worker is ignored); NewWorker
	// starts a remote worker that runs its workflows through the server's
	// worker protocol (docs/worker-protocol.md). Store and Backend must then be
	// empty.
	Server string
	// Token is the bearer token sent to Server (`trellis tokens create`). Under
	// mutual TLS, a client certificate (TLSConfig.Certificates) whose subject a
	// token holds stands for it, and Token may be empty.
	Token string
	// TLSConfig configures the connections to an https Server, of the client
	// and of a remote worker alike: RootCAs to trust a server certificate of a
	// private CA, Certificates to present a client certificate (mutual TLS);
	// nil: the system's roots and no client certificate. See docs/security.md,
	// "TLS and mutual TLS".
	TLSConfig *tls.Config
	// Namespace isolates runs; default "default".
	Namespace string
	// Codec encodes payloads; default JSONCodec.
	Codec Codec
	// MaxPayloadBytes caps every encoded payload; default 2 MiB.
	MaxPayloadBytes int
	// Logger receives the engine's logs; default discards them.
	Logger *slog.Logger
	// Worker configures the embedded worker.
	Worker WorkerOptions
	// Scheduler configures the embedded scheduler, which fires schedules
	// (docs/schedules.md). It runs with the embedded worker (not when
	// Worker.Disabled, nor on a Server); among all processes on a store, one
	// scheduler at a time leads.
	Scheduler SchedulerOptions
	// Clock is the one clock of the client, its worker and its store: the time
	// of every record, durable timers, in-place sleeps, retry backoffs, step
	// timeouts, the claim loop and heartbeats. Default the wall clock. Tests may
	// inject a fake clock that they move by hand.
	Clock Clock
	// Now, when set and Clock is not, is the time source (timers still wait on
	// the wall clock). Kept for compatibility: prefer Clock. After defaults it
	// is Clock.Now.
	Now func() time.Time
	// StepOverride, when set, may replace a step's function before its attempts
	// run: given the step's name and the type of its function
	// (func(context.Context) (T, error)), it returns a function of exactly that
	// type and true. Package trellistest sets it to mock steps in tests; programs
	// leave it nil. Steps replayed from history never consult it.
	StepOverride func(name string, fnType reflect.Type) (fn any, ok bool)
	// Interceptors wrap workflow attempts, step attempts and client calls, the
	// first outermost (see Interceptor).
	Interceptors []Interceptor
	// Metrics, when set, collects Prometheus metrics of this client, its worker
	// and its store into it (see NewMetrics and docs/observability.md).
	Metrics *Metrics
	// TracerProvider, when set, traces each run attempt and step attempt as
	// OpenTelemetry spans, children of the span that started the run (stored
	// with it). Nil: no tracing, at no cost. TracerFromEnv builds one from the
	// standard OTEL_* variables.
	TracerProvider trace.TracerProvider
}

// Clock is a source of time and timers (see Config.Clock).
type Clock = clock.Clock

// ClockTimer is a timer of a Clock, used as a time.Timer is.
type ClockTimer = clock.Timer

// WorkerOptions configure the worker that Open starts in the same process.
type WorkerOptions struct {
	// Disabled: this process only starts and inspects runs; other processes run them.
	Disabled bool
	// Name identifies the worker as lease owner; default host-pid-random.
	Name string
	// Queues to take runs from; default all.
	Queues []string
	// Concurrency caps the runs executing at once; default 256
	// (worker.DefaultConcurrency).
	Concurrency int
	// ClaimBatch caps the runs claimed by one query; default 256
	// (worker.DefaultClaimBatch).
	ClaimBatch int
	// LeaseDuration is how long a claim lasts without a heartbeat, hence how soon
	// another worker takes over the runs of a worker that crashed; default 10s
	// (worker.DefaultLeaseDuration).
	LeaseDuration time.Duration
	// HeartbeatInterval is how often leases are extended (in one batched call) and
	// the worker's record refreshed; default LeaseDuration/3.
	HeartbeatInterval time.Duration
	// StepTimeoutGrace is how long a step attempt may run past its timeout
	// (StepOptions.Timeout) while this worker's heartbeat still reports it,
	// before the store ends the run's lease (another worker then retries the
	// step by its policy; the attempt is recorded timed out). The worker
	// cancels the attempt's context at its timeout itself; the grace is for a
	// step that ignores its context. Default 15s (store.DefaultStepTimeoutGrace).
	// Through a server, the server's own (--step-timeout-grace) applies.
	StepTimeoutGrace time.Duration
	// ShutdownGrace is how long Close lets active runs finish before handing them
	// back; default 10s (worker.DefaultShutdownGrace).
	ShutdownGrace time.Duration
	// MaxInlineBackoff: a retry backoff up to this long waits in the worker; a
	// longer one releases the run to wait in the store. Default 2s.
	MaxInlineBackoff time.Duration
	// PollInterval is the fallback interval at which an idle worker looks for runs
	// and Result re-reads a run, for changes made by other processes that no push
	// reaches (SQLite across processes). Default 1s (worker.DefaultPollInterval).
	PollInterval time.Duration
	// RetentionInterval is how often the worker looks for finished runs past
	// their namespace's retention period (default 30 days) and deletes them,
	// in small batches in the background (docs/retention.md); default 1m.
	// Negative: never (another process purges).
	RetentionInterval time.Duration
}

// SchedulerOptions configure the scheduler that Open starts with the worker.
type SchedulerOptions struct {
	// Disabled: this process never fires schedules (others on the store do).
	Disabled bool
	// LeaseDuration is how long the scheduler lease lasts unrenewed, hence how
	// soon another process takes over from a leader that died; default 10s.
	LeaseDuration time.Duration
	// Interval is how often the scheduler renews or asks for the lease and fires
	// due ticks; default 1s (or LeaseDuration/2 if shorter), at most
	// LeaseDuration/2.
	Interval time.Duration
}

func (c Config) withDefaults() Config {
	if c.Store == "" && c.Server == "" {
		c.Store = "sqlite:trellis.db"
	}
	if c.Namespace == "" {
		c.Namespace = store.DefaultNamespace
	}
	if c.Codec == nil {
		c.Codec = JSONCodec{}
	}
	if c.MaxPayloadBytes <= 0 {
		c.MaxPayloadBytes = DefaultMaxPayloadBytes
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	switch {
	case c.Clock != nil:
	case c.Now != nil:
		c.Clock = clock.WithNow(c.Now)
	default:
		c.Clock = clock.Real{}
	}
	c.Now = c.Clock.Now
	w := &c.Worker
	if w.Name == "" {
		host, _ := os.Hostname()
		w.Name = fmt.Sprintf("%s-%d-%s", host, os.Getpid(), uuid.NewString()[:8])
	}
	if w.LeaseDuration <= 0 {
		w.LeaseDuration = worker.DefaultLeaseDuration
	}
	if w.ShutdownGrace <= 0 {
		w.ShutdownGrace = worker.DefaultShutdownGrace
	}
	if w.MaxInlineBackoff <= 0 {
		w.MaxInlineBackoff = 2 * time.Second
	}
	if w.PollInterval <= 0 {
		w.PollInterval = worker.DefaultPollInterval
	}
	return c
}

func (c Config) validate() error {
	switch {
	case c.Server != "" && (c.Store != "" || c.Backend != nil):
		return errors.New("trellis config: Server and Store (or Backend) exclude each other")
	case c.Namespace == "__system__":
		return errors.New("trellis config: Namespace __system__ is reserved")
	case c.Worker.HeartbeatInterval >= c.Worker.LeaseDuration:
		return errors.New("trellis config: Worker.HeartbeatInterval must be shorter than Worker.LeaseDuration")
	case c.Worker.Concurrency < 0:
		return errors.New("trellis config: Worker.Concurrency must not be negative")
	case c.Worker.StepTimeoutGrace < 0:
		return errors.New("trellis config: Worker.StepTimeoutGrace must not be negative")
	}
	return nil
}

// OpenStore opens the store named by a URL (see Config.Store), creating it or
// applying pending migrations as needed. The URL's scheme picks the driver
// registered for it (store.Open): "sqlite:" always, "postgres://" in a program
// that imports _ "github.com/trellis-dev/trellis/store/storepg"; without the
// import it fails with an error naming it.
func OpenStore(ctx context.Context, url string, now func() time.Time) (store.Store, error) {
	return openStore(ctx, url, now, false)
}

// OpenExistingStore opens the store named by a URL as it is, for tools that only
// look at it: it creates nothing and migrates nothing, and fails with an error
// wrapping store.ErrNoStore ("no Trellis store at ...") when the SQLite file or the
// Postgres schema is missing or not fully migrated. Pass it to Config.Backend.
func OpenExistingStore(ctx context.Context, url string, now func() time.Time) (store.Store, error) {
	return openStore(ctx, url, now, true)
}

func openStore(ctx context.Context, url string, now func() time.Time, noMigrate bool) (store.Store, error) {
	return OpenStoreWith(ctx, url, store.OpenOptions{Now: now, NoMigrate: noMigrate})
}

// OpenStoreWith opens the store named by a URL with every option a driver
// takes (store.OpenOptions), creating it or applying pending migrations unless
// opts.NoMigrate: OpenStore with a logger for what the driver reports outside
// any call (a trellis server passes its own).
func OpenStoreWith(ctx context.Context, url string, opts store.OpenOptions) (store.Store, error) {
	return store.Open(ctx, url, opts)
}
