// Package worker runs the claim loop of a Trellis worker: it claims due runs in
// batches, hands each to an Executor on its own goroutine, extends the leases it holds
// with one batched heartbeat, and shuts down gracefully.
package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/trellis-dev/trellis/internal/clock"
	"github.com/trellis-dev/trellis/store"
)

// ErrShutdown is the cause of a run context cancelled because the worker stops; the
// executor hands the run back instead of recording anything.
var ErrShutdown = errors.New("worker shutting down")

// Executor runs one claimed run until it finishes, waits, blocks or is handed back.
// It must return soon after ctx is done.
type Executor interface {
	Execute(ctx context.Context, run *store.ClaimedRun, ctl *Control)
}

// Control is the worker's side of one active run.
type Control struct {
	Lease     store.Lease
	cancelReq chan struct{}
	once      sync.Once
	mu        sync.Mutex
	onCancel  func()                        // called once by RequestCancel (see OnCancel)
	step      atomic.Pointer[store.RunStep] // the one of steps the heartbeat reports
	steps     []*store.RunStep              // the step attempts running, under mu
	// lost ends the run's context with store.ErrLeaseLost (see LeaseLost);
	// held checks the lease (see LeaseHeld). Both nil for a control made by
	// NewControl.
	lost context.CancelCauseFunc
	held func(context.Context) bool
	// expires is when the lease expires at the earliest, as this worker
	// knows it (Unix nanoseconds of its clock): the claim's expiry, then the
	// send time of each extension plus its duration.
	expires atomic.Int64
}

// LeaseLost tells the worker that a write of the run was refused because its
// lease is lost (fenced): the run's context ends with store.ErrLeaseLost, so
// that its steps in flight stop and no new one starts, as when a heartbeat
// reports the lease lost.
func (c *Control) LeaseLost() {
	if c.lost != nil {
		c.lost(store.ErrLeaseLost)
	}
}

// StepStarted records that a step attempt of the run started (the step at
// position pos, with its declared timeout, 0 for none); the worker's next
// heartbeat reports it with the lease (store.Run.CurrentStep), so a step costs
// no write of its own. Pass what it returns to StepEnded.
//
// When steps of the run run in parallel (async steps), the heartbeat carries
// one of them: the one whose deadline (Since + Timeout) comes first, steps
// without a timeout after all others, the oldest first. That is the one the
// store ends first when it runs past its timeout, and the one a claim records
// lost if the worker goes away; the others running with it are not seen (see
// docs/worker-protocol.md, "Lost and timed-out attempts").
func (c *Control) StepStarted(name string, pos, attempt int, since time.Time, timeout time.Duration) *store.RunStep {
	if len(name) > store.MaxNameLen { // what the lease call accepts: cut, never refused
		name = strings.ToValidUTF8(name[:store.MaxNameLen], "")
	}
	s := &store.RunStep{Name: name, Attempt: max(attempt, 1), Since: since, Position: max(pos, 0), Timeout: max(timeout, 0)}
	c.mu.Lock()
	c.steps = append(c.steps, s)
	if len(c.steps) == 1 || reportsBefore(s, c.step.Load()) {
		c.step.Store(s)
	}
	c.mu.Unlock()
	return s
}

// reportsBefore reports whether the heartbeat reports running step a rather
// than b (see StepStarted).
func reportsBefore(a, b *store.RunStep) bool {
	switch {
	case b == nil:
		return true
	case (a.Timeout > 0) != (b.Timeout > 0):
		return a.Timeout > 0
	case a.Timeout > 0:
		return a.Since.Add(a.Timeout).Before(b.Since.Add(b.Timeout))
	default:
		return a.Since.Before(b.Since)
	}
}

// StepEnded records that the attempt StepStarted returned s for ended.
func (c *Control) StepEnded(s *store.RunStep) {
	c.mu.Lock()
	defer c.mu.Unlock()
	i := slices.Index(c.steps, s)
	if i < 0 {
		return
	}
	c.steps = slices.Delete(c.steps, i, i+1)
	if c.step.Load() != s {
		return
	}
	var next *store.RunStep
	for _, o := range c.steps {
		if reportsBefore(o, next) {
			next = o
		}
	}
	c.step.Store(next)
}

// Step returns the step attempt the heartbeat reports, the zero RunStep when
// none runs.
func (c *Control) Step() store.RunStep {
	if s := c.step.Load(); s != nil {
		return *s
	}
	return store.RunStep{}
}

// LeaseHeld reports whether the run's lease may still be held, before a side
// effect starts (a step's attempt). It costs a clock read while the lease is
// known to last; once its known expiry has passed (the worker was frozen or
// cut off past its lease, and no heartbeat has told it yet), it asks the store
// (one lease extension), and a lost lease ends the run's context with
// store.ErrLeaseLost.
func (c *Control) LeaseHeld(ctx context.Context) bool {
	return c.held == nil || c.held(ctx)
}

// extended records an extension of the lease sent at at for d: the lease
// lasts at least until at+d (a lost one is stopped by the caller).
func (c *Control) extended(at time.Time, d time.Duration) {
	until := at.Add(d).UnixNano()
	for {
		old := c.expires.Load()
		if old >= until || c.expires.CompareAndSwap(old, until) {
			return
		}
	}
}

// NewControl returns the control of a run held with lease, for an executor
// driven without a worker (tests of the engine).
func NewControl(lease store.Lease) *Control {
	return &Control{Lease: lease, cancelReq: make(chan struct{})}
}

// CancelRequested is closed once a cancellation of the run is known.
func (c *Control) CancelRequested() <-chan struct{} { return c.cancelReq }

// RequestCancel records that the run was cancelled. Idempotent.
func (c *Control) RequestCancel() {
	c.once.Do(func() {
		close(c.cancelReq)
		c.mu.Lock()
		f := c.onCancel
		c.onCancel = nil
		c.mu.Unlock()
		if f != nil {
			f()
		}
	})
}

// OnCancel makes RequestCancel call f (at once when the run is already
// cancelled), instead of a goroutine waiting on CancelRequested; the returned
// function unregisters it. One function at a time.
func (c *Control) OnCancel(f func()) (stop func()) {
	c.mu.Lock()
	select {
	case <-c.cancelReq:
		c.mu.Unlock()
		f()
		return func() {}
	default:
	}
	c.onCancel = f
	c.mu.Unlock()
	return func() {
		c.mu.Lock()
		c.onCancel = nil
		c.mu.Unlock()
	}
}

// Store is the part of the storage contract a worker calls: the worker role
// and the registry of workers. A store that also implements Pusher has claims
// pushed to the worker (see pushLoop).
type Store interface {
	store.WorkerStore
	store.WorkerRegistry
}

// Pusher is a store that pushes claims to a worker (store/storeremote): a
// claim stream with credit p.Max stays open up to wait and delivers each run
// claimed for the worker as it becomes due. reconnect reports that the server
// asked the worker to open the stream again.
type Pusher interface {
	ClaimPush(ctx context.Context, p *store.RunsClaimParams, wait time.Duration, deliver func(*store.ClaimedRun)) (reconnect bool, err error)
}

// Config configures a worker.
type Config struct {
	// OnClaim, when set, is told of every claim query: how long it took (wall
	// time) and how many runs it claimed (metrics).
	OnClaim func(elapsed time.Duration, runs int)
	// OnEndedAttempts, when set, is told of the step attempts a claim of this
	// worker recorded as lost or timed out (store.RunsClaimResult.EndedAttempts).
	OnEndedAttempts func([]store.EndedAttemptInfo)
	// StepTimeoutGrace is the grace past a step attempt's declared timeout
	// after which the store ends its lease (store.LeasesExtendParams); 0 is
	// store.DefaultStepTimeoutGrace. A server ignores it and applies its own.
	StepTimeoutGrace time.Duration
	Store            Store
	Namespace        string
	Queues           []string
	// Workflows returns the workflow names this worker can run.
	Workflows func() []string
	// Versions, when set, returns the versions of each workflow the worker
	// serves to runs pinned to a version (store.RunsClaimParams.Versions); the
	// worker neither changes nor keeps the map. Nil: it serves no pinned run.
	Versions func() map[string][]int
	// Name identifies the worker as lease owner. Required.
	Name string
	// Concurrency caps the runs executing at once. Default DefaultConcurrency (256).
	Concurrency int
	// ClaimBatch caps the runs claimed by one query. Default DefaultClaimBatch (256).
	ClaimBatch int
	// LeaseDuration is how long a claim lasts without a heartbeat, and how long the
	// worker's store record stays live. Default DefaultLeaseDuration (10s).
	LeaseDuration time.Duration
	// HeartbeatInterval is how often leases are extended and the worker's record
	// refreshed. Default LeaseDuration/HeartbeatFraction.
	HeartbeatInterval time.Duration
	// ShutdownGrace is how long Stop lets active runs finish before handing them
	// back. Default DefaultShutdownGrace (10s).
	ShutdownGrace time.Duration
	// PollInterval is the fallback claim interval when no wake-up arrives, for
	// changes no push reaches (SQLite across processes). Default 1s.
	PollInterval time.Duration
	// Version describes the worker's binary in its store record (free text).
	// Default BuildVersion().
	Version string
	Logger  *slog.Logger
	// Clock schedules claims and heartbeats; default the wall clock.
	Clock clock.Clock
}

// Defaults of Config, the single source of these values: the root package's
// WorkerOptions refer to them.
const (
	DefaultConcurrency = 256
	DefaultClaimBatch  = 256
	// DefaultLeaseDuration bounds how long a crashed worker's runs wait before
	// another worker takes them over. Heartbeats are batched (one lease statement
	// per tick on Postgres, one transaction per tick on SQLite), so a short lease
	// costs little.
	DefaultLeaseDuration = 10 * time.Second
	// DefaultShutdownGrace is how long Stop lets active runs finish.
	DefaultShutdownGrace = 10 * time.Second
	DefaultPollInterval  = time.Second
)

// HeartbeatFraction: the default HeartbeatInterval is LeaseDuration/HeartbeatFraction,
// so a lease survives two lost heartbeats.
const HeartbeatFraction = 3

func (c Config) withDefaults() Config {
	if c.Namespace == "" {
		c.Namespace = "default"
	}
	if c.Concurrency <= 0 {
		c.Concurrency = DefaultConcurrency
	}
	if c.ClaimBatch <= 0 {
		c.ClaimBatch = DefaultClaimBatch
	}
	if c.LeaseDuration <= 0 {
		c.LeaseDuration = DefaultLeaseDuration
	}
	if c.HeartbeatInterval <= 0 {
		c.HeartbeatInterval = c.LeaseDuration / HeartbeatFraction
	}
	if c.ShutdownGrace <= 0 {
		c.ShutdownGrace = DefaultShutdownGrace
	}
	if c.PollInterval <= 0 {
		c.PollInterval = DefaultPollInterval
	}
	if c.Version == "" {
		c.Version = BuildVersion()
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	c.Clock = clock.Or(c.Clock)
	return c
}

func (c Config) validate() error {
	switch {
	case c.Store == nil:
		return errors.New("worker config: Store is required")
	case c.Workflows == nil:
		return errors.New("worker config: Workflows is required")
	case c.Name == "":
		return errors.New("worker config: Name is required")
	case c.HeartbeatInterval >= c.LeaseDuration:
		return errors.New("worker config: HeartbeatInterval must be shorter than LeaseDuration")
	}
	return nil
}

// Worker claims and executes runs. Start it once; Stop it once (Stop is idempotent).
type Worker struct {
	cfg  Config
	exec Executor

	wake chan struct{} // coalesced: registry changed or a slot freed
	// cancelGen counts the cancellation signals the heartbeat loop handled;
	// recheck asks it to extend the leases again (see claimedSince).
	cancelGen atomic.Uint64
	recheck   chan struct{}
	stopOnce  sync.Once
	stopping  chan struct{} // closed by Stop: claim no more
	hardCtx   context.Context
	hardStop  context.CancelCauseFunc
	loops     sync.WaitGroup // claim and heartbeat loops
	rec       record         // the worker's record in the store

	mu sync.Mutex
	// running counts run goroutines; idle, when Stop waits for them, is closed
	// when the count drops to zero. (A WaitGroup cannot serve: a claim or a
	// direct dispatch may start a run while Stop waits.)
	running int
	idle    chan struct{}
	// queued are the runs of a claim that brought more than the free slots,
	// oldest first: leased and in active, waiting for a slot (launch).
	queued   []func()
	closed   bool // Stop is done: a late Launch runs its run in the caller
	active   map[string]*active
	reserved int  // slots promised to runs being created in this process
	wantMore bool // the last claim was capped by free slots
	backlog  bool // the last claim found as many runs as it asked for
	// stream is the claim stream open now (pushLoop): the workflows it claims
	// for, and the function that ends it; nil when none is open.
	stream *openStream
}

// openStream is a claim stream in flight (see pushLoop).
type openStream struct {
	workflows []string // sorted
	end       context.CancelFunc
}

type active struct {
	ctl    *Control
	cancel context.CancelCauseFunc
	run    *store.Run // as claimed: its lines name it, its workflow and claim
}

// New returns a worker; it does nothing until Start.
func New(cfg Config, exec Executor) (*Worker, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	hardCtx, hardStop := context.WithCancelCause(context.Background())
	return &Worker{
		cfg: cfg, exec: exec,
		wake:     make(chan struct{}, 1),
		recheck:  make(chan struct{}, 1),
		stopping: make(chan struct{}),
		hardCtx:  hardCtx, hardStop: hardStop,
		active: make(map[string]*active),
	}, nil
}

// Start launches the claim and heartbeat loops.
func (w *Worker) Start() {
	// Subscribed to cancellations before the first claim starts: one signalled
	// while that claim runs must reach its runs (claimedSince). Subscribed by the
	// heartbeat loop as it started, such a signal was lost when the claim loop
	// ran first, and the run learned of its cancellation only at the next
	// heartbeat (TestCancelDuringClaim hung, now and then, under load).
	cancels, unsubscribe, err := w.cfg.Store.Subscribe(w.hardCtx, store.TopicCancel)
	if err != nil { // the heartbeat ticks alone
		cancels, unsubscribe = nil, func() {}
	}
	w.loops.Add(2)
	if p, ok := w.cfg.Store.(Pusher); ok {
		go w.pushLoop(p)
	} else {
		go w.claimLoop()
	}
	go w.heartbeatLoop(cancels, unsubscribe)
}

// Wake makes the claim loop look for runs now (e.g. after a workflow is
// registered). A claim stream open for other workflows than the worker's now
// ends, so that the next one claims for all of them: it would otherwise claim
// for the old ones only until it ended on its own (pushWait).
func (w *Worker) Wake() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
	w.mu.Lock()
	st := w.stream
	w.mu.Unlock()
	if st != nil && !slices.Equal(st.workflows, w.sortedWorkflows()) {
		st.end()
	}
}

// RequestCancel tells an active run of this worker that it was cancelled. It reports
// whether the run is active here.
func (w *Worker) RequestCancel(runID string) bool {
	w.mu.Lock()
	a := w.active[runID]
	w.mu.Unlock()
	if a != nil {
		a.ctl.RequestCancel()
	}
	return a != nil
}

// Reserve takes a free slot for a run this process is about to create already
// claimed (store.RunCreateParams.Claim). It declines while the worker stops,
// has no free slot, or the store may hold a backlog of due runs, which keep
// their claim order. After a true result, call exactly one of Launch and
// Unreserve.
func (w *Worker) Reserve() bool {
	if w.stopped() {
		return false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.backlog || len(w.active)+w.reserved >= w.cfg.Concurrency {
		// The run goes to the store pending: claim it as soon as slots free
		// up, not at the next poll.
		w.backlog, w.wantMore = true, true
		return false
	}
	w.reserved++
	return true
}

// Unreserve returns a slot taken by Reserve.
func (w *Worker) Unreserve() {
	w.mu.Lock()
	w.reserved--
	w.mu.Unlock()
}

// Launch executes a run created already claimed by this worker in a slot taken
// by Reserve.
func (w *Worker) Launch(cr *store.ClaimedRun) {
	w.mu.Lock()
	w.reserved--
	w.mu.Unlock()
	w.launch(cr)
}

// Name is the worker's lease-owner name.
func (w *Worker) Name() string { return w.cfg.Name }

// LeaseDuration is how long the worker's claims last without a heartbeat.
func (w *Worker) LeaseDuration() time.Duration { return w.cfg.LeaseDuration }

// Executing returns how many runs this worker holds the leases of: those it
// executes now and those of a claim that wait for a slot (launch).
func (w *Worker) Executing() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.active)
}

// Active returns how many slots are busy: runs executing and slots reserved.
func (w *Worker) Active() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.activeLocked()
}

// activeLocked is Active for a caller that holds w.mu.
func (w *Worker) activeLocked() int { return len(w.active) + w.reserved }

// Stop stops claiming, lets active runs finish for up to ShutdownGrace, then cancels
// the rest (their executors hand them back), waits for every goroutine, or until
// ctx is done, and removes the worker's record from the store.
func (w *Worker) Stop(ctx context.Context) error {
	w.stopOnce.Do(func() { close(w.stopping) })
	// The grace bounds this process's own stop in wall time: a fake clock must
	// not hold a test's shutdown.
	grace := clock.Real{}.NewTimer(w.cfg.ShutdownGrace)
	defer grace.Stop()
	select {
	case <-w.idleCh():
	case <-grace.C():
	case <-ctx.Done():
	}
	w.hardStop(ErrShutdown)
	if err := w.waitIdle(ctx); err != nil {
		return err
	}
	w.loops.Wait()
	// Runs a claim in flight launched meanwhile see the hard stop and hand back.
	if err := w.waitIdle(ctx); err != nil {
		return err
	}
	w.mu.Lock()
	w.closed = true
	w.mu.Unlock()
	if err := w.removeRecord(ctx); err != nil {
		return fmt.Errorf("stopping worker: %w", err)
	}
	return nil
}

func (w *Worker) stopped() bool {
	select {
	case <-w.stopping:
		return true
	default:
		return false
	}
}

// idleCh returns a channel closed once no run goroutine is left.
func (w *Worker) idleCh() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.running == 0 {
		c := make(chan struct{})
		close(c)
		return c
	}
	if w.idle == nil {
		w.idle = make(chan struct{})
	}
	return w.idle
}

// waitIdle waits until no run goroutine is left, or ctx is done.
func (w *Worker) waitIdle(ctx context.Context) error {
	select {
	case <-w.idleCh():
		return nil
	case <-ctx.Done():
		return fmt.Errorf("stopping worker: %w", ctx.Err())
	}
}
