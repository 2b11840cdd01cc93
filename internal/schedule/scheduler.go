package schedule

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/trellis-dev/trellis/internal/clock"
	"github.com/trellis-dev/trellis/store"
)

// Defaults of Config.
const (
	DefaultLeaseDuration = 10 * time.Second
	DefaultInterval      = time.Second
	// MaxFiresPerPass caps the ticks one schedule fires in one pass; the rest
	// follow in the next passes.
	MaxFiresPerPass = 100
)

// Store is what the scheduler needs of a store.
type Store interface {
	store.ScheduleStore
	RunGet(ctx context.Context, p *store.RunGetParams) (*store.Run, error)
}

// Config configures a Scheduler.
type Config struct {
	Store Store
	// Owner names this scheduler in the lease; unique among the processes on the
	// store (the worker's name does).
	Owner string
	Clock clock.Clock
	// LeaseDuration is how long the lease lasts unrenewed, hence how soon another
	// scheduler takes over from one that died; default DefaultLeaseDuration.
	LeaseDuration time.Duration
	// Interval is how often the scheduler renews or asks for the lease and fires
	// due ticks; default DefaultInterval (or LeaseDuration/2 if shorter); at most
	// LeaseDuration/2.
	Interval time.Duration
	// Version returns the version a run of workflow is started with (the
	// registered workflow's); nil: 0.
	Version func(workflow string) int
	// Started, when set, is told of every run a fire created (not of a run a
	// retried fire found existing): the metrics count it as a start.
	Started func(run *store.Run)
	Logger  *slog.Logger
}

// Scheduler fires the ticks of every schedule of a store while it is leader. Start
// it once; Stop ends its goroutine and hands the lease back.
type Scheduler struct {
	cfg    Config
	mu     sync.Mutex
	epoch  int64 // the epoch held (0: not leader)
	stop   chan struct{}
	done   chan struct{}
	start  sync.Once
	halt   sync.Once
	cancel context.CancelFunc
	ctx    context.Context
}

// New returns a scheduler; it does nothing until Start (or Pass).
func New(cfg Config) (*Scheduler, error) {
	if cfg.Store == nil || cfg.Owner == "" {
		return nil, errors.New("scheduler: Store and Owner are required")
	}
	cfg.Clock = clock.Or(cfg.Clock)
	if cfg.LeaseDuration <= 0 {
		cfg.LeaseDuration = DefaultLeaseDuration
	}
	if cfg.Interval <= 0 {
		cfg.Interval = min(DefaultInterval, cfg.LeaseDuration/2)
	}
	if cfg.Interval > cfg.LeaseDuration/2 {
		return nil, fmt.Errorf("scheduler: Interval %s must be at most half of LeaseDuration %s", cfg.Interval, cfg.LeaseDuration)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Scheduler{cfg: cfg, stop: make(chan struct{}), done: make(chan struct{}), ctx: ctx, cancel: cancel}, nil
}

// Start starts the scheduler's goroutine: a pass at once, then one every Interval.
func (s *Scheduler) Start() {
	s.start.Do(func() { go s.loop() })
}

func (s *Scheduler) loop() {
	defer close(s.done)
	t := s.cfg.Clock.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C():
		}
		if err := s.Pass(s.ctx); err != nil && s.ctx.Err() == nil {
			s.cfg.Logger.Warn("scheduler pass failed", "err", err)
		}
		t.Reset(s.cfg.Interval)
	}
}

// Stop ends the goroutine (a pass in flight is cancelled) and, if this
// scheduler leads, releases the lease so another takes over at once. Safe to
// call more than once, and without Start.
func (s *Scheduler) Stop(ctx context.Context) error {
	var err error
	s.halt.Do(func() {
		close(s.stop)
		s.cancel()
		started := true
		s.start.Do(func() { started = false; close(s.done) })
		if started {
			select {
			case <-s.done:
			case <-ctx.Done():
				err = ctx.Err()
				return
			}
		}
		if epoch := s.Epoch(); epoch > 0 {
			err = s.cfg.Store.SchedulerLeaseRelease(ctx, &store.SchedulerLeaseParams{Owner: s.cfg.Owner, Epoch: epoch})
			if errors.Is(err, store.ErrClosed) {
				err = nil // the lease expires on its own
			}
			s.setEpoch(0)
		}
	})
	return err
}

// Epoch returns the epoch of the lease this scheduler holds, 0 when it is not
// leader (as of its last pass).
func (s *Scheduler) Epoch() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.epoch
}

func (s *Scheduler) setEpoch(e int64) {
	s.mu.Lock()
	s.epoch = e
	s.mu.Unlock()
}

// Pass renews or asks for the lease and, as leader, fires every due tick of
// every active schedule. The loop calls it every Interval; tests call it
// directly with a fake clock.
func (s *Scheduler) Pass(ctx context.Context) error {
	l, err := s.cfg.Store.SchedulerLeaseAcquire(ctx, &store.SchedulerLeaseParams{
		Owner: s.cfg.Owner, Epoch: s.Epoch(), Duration: s.cfg.LeaseDuration})
	if err != nil {
		return err
	}
	was := s.Epoch()
	if !l.Held {
		if was > 0 {
			s.cfg.Logger.Info("scheduler lost the lease", "owner", s.cfg.Owner, "epoch", was, "holder", l.Owner)
		}
		s.setEpoch(0)
		return nil
	}
	if was != l.Epoch {
		s.cfg.Logger.Info("scheduler leads", "owner", s.cfg.Owner, "epoch", l.Epoch)
	}
	s.setEpoch(l.Epoch)
	list, err := s.cfg.Store.ScheduleList(ctx, &store.ScheduleListParams{})
	if err != nil {
		return err
	}
	var errs []error
	for _, sc := range list {
		if sc.Paused {
			continue
		}
		err := s.tick(ctx, sc, l.Epoch)
		switch {
		case errors.Is(err, store.ErrNotLeader):
			s.cfg.Logger.Info("scheduler fenced out: another leads", "owner", s.cfg.Owner, "epoch", l.Epoch)
			s.setEpoch(0)
			return nil
		case errors.Is(err, store.ErrSchedulePaused), errors.Is(err, store.ErrScheduleNotFound):
			continue // paused or deleted since the list was read
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("schedule %s/%s: %w", sc.Namespace, sc.Name, err))
		}
	}
	return errors.Join(errs...)
}

// tick fires the due ticks of one schedule under epoch.
func (s *Scheduler) tick(ctx context.Context, sc *store.Schedule, epoch int64) error {
	spec, err := Parse(sc.Cron, sc.TimeZone)
	if err != nil {
		return err // checked when written; a zone database may have changed
	}
	now := s.cfg.Clock.Now()
	active, err := s.active(ctx, sc)
	if err != nil {
		return err
	}
	buffered := sc.BufferedAt
	if buffered != nil && !active {
		// The run the buffered tick waited for has ended: start it now.
		res, err := s.fire(ctx, sc, &store.ScheduleFireParams{Epoch: epoch, SetBuffered: true,
			Run: RunParams(sc, RunID(sc.Name, *buffered), s.version(sc.Workflow))})
		if err != nil {
			return err
		}
		buffered, active, sc.LastRunID = nil, true, res.Run.ID
	}
	floor := now.Add(-sc.CatchupWindow) // older ticks are past the catch-up window: skipped
	from := spec.SkipTo(sc.LastFireAt, floor)
	for fired := 0; fired < MaxFiresPerPass; {
		at := spec.Next(from)
		if at.IsZero() || at.After(now) {
			return nil
		}
		from = at
		if at.Before(floor) {
			continue
		}
		fired++
		p := &store.ScheduleFireParams{Epoch: epoch, Cursor: &at}
		run := RunParams(sc, RunID(sc.Name, at), s.version(sc.Workflow))
		switch {
		case !active || sc.Overlap == store.OverlapAllowAll:
			p.Run = run
		case sc.Overlap == store.OverlapCancelPrevious:
			p.Run, p.CancelRunID = run, sc.LastRunID
		case sc.Overlap == store.OverlapBufferOne && buffered == nil:
			p.SetBuffered, p.Buffered = true, &at
			buffered = &at
		default: // skip, or buffer_one with a tick already buffered
		}
		res, err := s.fire(ctx, sc, p)
		if err != nil {
			return err
		}
		if res.Run != nil {
			active, sc.LastRunID = true, res.Run.ID
		}
	}
	return nil
}

func (s *Scheduler) fire(ctx context.Context, sc *store.Schedule, p *store.ScheduleFireParams) (*store.ScheduleFireResult, error) {
	p.Namespace, p.Name = sc.Namespace, sc.Name
	res, err := s.cfg.Store.ScheduleFire(ctx, p)
	if err != nil {
		return nil, err
	}
	if res.Run != nil && res.Created {
		s.cfg.Logger.Info("schedule fired", "namespace", sc.Namespace, "schedule", sc.Name, "run_id", res.Run.ID, "workflow", res.Run.Workflow)
		if s.cfg.Started != nil {
			s.cfg.Started(res.Run)
		}
	}
	return res, nil
}

// active reports whether the schedule's last run is still active.
func (s *Scheduler) active(ctx context.Context, sc *store.Schedule) (bool, error) {
	if sc.LastRunID == "" {
		return false, nil
	}
	run, err := s.cfg.Store.RunGet(ctx, &store.RunGetParams{Namespace: sc.Namespace, Ref: sc.LastRunID, OmitLarge: true})
	switch {
	case errors.Is(err, store.ErrRunNotFound):
		return false, nil
	case err != nil:
		return false, err
	}
	return !run.Status.Terminal(), nil
}

func (s *Scheduler) version(workflow string) int {
	if s.cfg.Version == nil {
		return 0
	}
	return s.cfg.Version(workflow)
}

// RunID is the deterministic run ID of a schedule's tick at at: a fire retried,
// by the same leader or the next, or a backfill of the same tick, is the same run.
func RunID(schedule string, at time.Time) string {
	return "sched-" + schedule + "-" + at.UTC().Format("20060102T150405Z")
}

// TriggerRunID is the run ID of a trigger (a run started by hand) at at.
func TriggerRunID(schedule string, at time.Time) string {
	return "sched-" + schedule + "-trigger-" + strings.ReplaceAll(at.UTC().Format("20060102T150405.000000000Z"), ".", "")
}

// RunParams are the parameters of a run of sc with run (and workflow) ID id.
func RunParams(sc *store.Schedule, id string, version int) *store.RunCreateParams {
	input := sc.Input
	if len(input) == 0 {
		input = []byte("null")
	}
	return &store.RunCreateParams{Namespace: sc.Namespace, ID: id, WorkflowID: id, Workflow: sc.Workflow,
		Queue: sc.Queue, Version: version, Input: input}
}

// MaxBackfill caps the ticks one backfill starts.
const MaxBackfill = 1000

// Ticks returns the ticks of spec in [from, to), at most max; ok is false when
// there are more.
func Ticks(spec *Spec, from, to time.Time, max int) (ticks []time.Time, ok bool) {
	for at := spec.Next(from.Add(-time.Nanosecond)); !at.IsZero() && at.Before(to); at = spec.Next(at) {
		if len(ticks) == max {
			return ticks, false
		}
		ticks = append(ticks, at)
	}
	return ticks, true
}
