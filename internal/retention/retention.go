// Package retention deletes finished runs once their namespace's retention
// period has passed: a background purger, owned by `trellis server` and by
// every embedded worker, that deletes expired runs in small batches (one short
// transaction each) and rests between batches so that checkpoints and claims
// keep the store (see docs/retention.md). It deletes the expired entries of
// the audit log the same way (audit.go).
package retention

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/trellis-dev/trellis/internal/clock"
	"github.com/trellis-dev/trellis/store"
)

// DefaultPeriod is a namespace's retention period unless it says otherwise.
const DefaultPeriod = 30 * 24 * time.Hour

// PeriodOf returns the retention period of a namespace: its record's
// (trellis namespaces create|update --retention), else DefaultPeriod for a
// namespace without a record. It is the one place that decides it.
func PeriodOf(ctx context.Context, st store.Store, ns string) (time.Duration, error) {
	n, err := st.NamespaceGet(ctx, &store.NamespaceGetParams{Name: ns})
	switch {
	case errors.Is(err, store.ErrNamespaceNotFound):
		return DefaultPeriod, nil
	case err != nil:
		return 0, err
	case n.Retention <= 0:
		return DefaultPeriod, nil
	}
	return time.Duration(n.Retention), nil
}

// Defaults of Config.
const (
	DefaultInterval = time.Minute
	// DefaultBatch runs per purge transaction: a few milliseconds of work.
	DefaultBatch = store.DefaultPurgeBatch
	// DefaultDuty is the share of time the purger works while it has a
	// backlog: after a batch that took d it rests d*(1-Duty)/Duty.
	DefaultDuty = 0.1
)

// Config configures a purger.
type Config struct {
	Store store.Store
	// Period returns a namespace's retention period; default PeriodOf.
	Period func(ctx context.Context, namespace string) (time.Duration, error)
	// Interval is how often the purger looks for expired runs when it has
	// none left; default DefaultInterval.
	Interval time.Duration
	// Batch is how many runs one transaction deletes; default DefaultBatch.
	Batch int
	// GlobalPeriod returns the retention period of the audit entries of no
	// namespace; default GlobalPeriodOf.
	GlobalPeriod func(ctx context.Context) (time.Duration, error)
	// AuditBatch is how many audit entries one transaction deletes; default
	// store.DefaultAuditPurgeBatch.
	AuditBatch int
	// Duty (0 < Duty <= 1) is the share of time spent deleting while a
	// backlog remains; default DefaultDuty.
	Duty   float64
	Logger *slog.Logger
	Clock  clock.Clock
}

// Purger deletes expired runs in the background. Start it once; Stop ends it.
type Purger struct {
	cfg     Config
	stop    chan struct{}
	done    chan struct{}
	once    sync.Once
	mu      sync.Mutex
	started bool
	deleted int64
	// auditDeleted counts the audit entries deleted (AuditDeleted).
	auditDeleted int64
}

// New returns a purger; it does nothing until Start.
func New(cfg Config) *Purger {
	if cfg.Period == nil {
		st := cfg.Store
		cfg.Period = func(ctx context.Context, ns string) (time.Duration, error) { return PeriodOf(ctx, st, ns) }
	}
	if cfg.GlobalPeriod == nil {
		st := cfg.Store
		cfg.GlobalPeriod = func(ctx context.Context) (time.Duration, error) { return GlobalPeriodOf(ctx, st) }
	}
	if cfg.AuditBatch <= 0 {
		cfg.AuditBatch = store.DefaultAuditPurgeBatch
	}
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.Batch <= 0 {
		cfg.Batch = DefaultBatch
	}
	if cfg.Duty <= 0 || cfg.Duty > 1 {
		cfg.Duty = DefaultDuty
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	cfg.Clock = clock.Or(cfg.Clock)
	return &Purger{cfg: cfg, stop: make(chan struct{}), done: make(chan struct{})}
}

// Start launches the purger's goroutine, which runs until Stop. Only the
// first call does anything.
func (p *Purger) Start() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.started {
		p.started = true
		go p.loop()
	}
}

// Stop ends the purger and waits for its goroutine (a batch in flight is
// cancelled: it deletes all of its runs or none). Idempotent.
func (p *Purger) Stop() {
	p.once.Do(func() { close(p.stop) })
	p.mu.Lock()
	started := p.started
	p.started = true // a Start after Stop does nothing
	p.mu.Unlock()
	if started {
		<-p.done
	}
}

// Deleted is how many runs the purger has deleted so far.
func (p *Purger) Deleted() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.deleted
}

func (p *Purger) loop() {
	defer close(p.done)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { // owned by loop: ends when loop returns (cancel) or Stop
		select {
		case <-p.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	for {
		if err := p.Pass(ctx); err != nil && ctx.Err() == nil {
			p.cfg.Logger.Warn("purging expired runs", "err", err)
		}
		if err := p.passAudit(ctx); err != nil && ctx.Err() == nil {
			p.cfg.Logger.Warn("purging expired audit entries", "err", err)
		}
		if !p.sleep(p.cfg.Interval) {
			return
		}
	}
}

// sleep waits d, or until Stop; it reports false once stopped.
func (p *Purger) sleep(d time.Duration) bool {
	t := p.cfg.Clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C():
		return true
	case <-p.stop:
		return false
	}
}

// Pass deletes every run expired now, namespace by namespace, batch by batch,
// resting between batches as Duty says. It returns at the first error.
func (p *Purger) Pass(ctx context.Context) error {
	namespaces, err := p.cfg.Store.RunNamespaces(ctx)
	if err != nil {
		return err
	}
	for _, ns := range namespaces {
		period, err := p.cfg.Period(ctx, ns)
		if err != nil {
			return err
		}
		if period <= 0 {
			continue // kept for ever
		}
		err = p.inBatches(ctx, p.cfg.Batch, &p.deleted, "runs", ns, func() (int, error) {
			return p.cfg.Store.RunsPurge(ctx, &store.RunsPurgeParams{Namespace: ns,
				FinishedBefore: p.cfg.Clock.Now().Add(-period), Limit: p.cfg.Batch})
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// inBatches calls purge, which deletes at most batch of what (in namespace
// ns) and says how many it deleted, until a batch is short, resting between
// batches as Duty says; counted adds what each deleted. It returns nil when
// ctx or the Purger ends.
func (p *Purger) inBatches(ctx context.Context, batch int, counted *int64, what, ns string, purge func() (int, error)) error {
	for {
		t0 := time.Now()
		n, err := purge()
		if err != nil {
			if errors.Is(err, context.Canceled) && ctx.Err() != nil {
				return nil
			}
			return err
		}
		p.mu.Lock()
		*counted += int64(n)
		p.mu.Unlock()
		if n > 0 {
			p.cfg.Logger.Debug("purged expired "+what, "namespace", ns, "deleted", n)
		}
		if n < batch || !p.rest(ctx, time.Since(t0)) {
			return nil
		}
	}
}

// rest waits after a batch that took took, as Duty says; it reports false
// when ctx ended first.
func (p *Purger) rest(ctx context.Context, took time.Duration) bool {
	rest := time.Duration(float64(took) * (1 - p.cfg.Duty) / p.cfg.Duty)
	if rest <= 0 {
		return true
	}
	t := time.NewTimer(rest)
	defer t.Stop()
	select { // the rest is wall time: the work it spaces out is
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
