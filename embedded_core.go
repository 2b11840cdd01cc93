package trellis

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/trellis-dev/trellis/internal/queuedefaults"
	"github.com/trellis-dev/trellis/internal/retention"
	"github.com/trellis-dev/trellis/internal/schedule"
	"github.com/trellis-dev/trellis/store"
)

// core is what the embedded clients of a store share with a server on it,
// whatever their namespace: the store, the namespace and queue records that
// starts and events apply (objects), the queues' default retry policies, and
// the scheduler and the purger, wired here only (background). The operations
// are the embedded backend's methods: an embedded Client is a core of its own
// plus its namespace, worker and results watcher; a server has one core and
// makes a Client of it for each request (server_core.go), which carries the
// request's namespace, idempotency key and hand-off explicitly (calls).
type core struct {
	store     store.Store
	ownsStore bool
	objects   objectCache
	// queues caches the default retry policies of queues for the runs of
	// workers on the store, made on first use (queueDefaults).
	queues    *queuedefaults.Cache
	logger    *slog.Logger
	scheduler *schedule.Scheduler
	purger    *retention.Purger
	watchers  // a server's: its results watchers by namespace (server_core.go)
}

// background configures the scheduler and the purger of a core.
type background struct {
	// Scheduler: fire the store's schedules (its lease, shared with the other
	// processes on the store, in the name of Owner).
	Scheduler         bool
	Owner             string
	SchedulerLease    time.Duration
	SchedulerInterval time.Duration
	// Version is the version a fired run of a workflow takes (nil: 0);
	// Started is told of each run the scheduler starts.
	Version func(workflow string) int
	Started func(*store.Run)
	// RetentionInterval is the purger's pass interval; negative: no purger.
	RetentionInterval time.Duration
	Clock             Clock // nil: the wall clock
	Logger            *slog.Logger
}

// startBackground creates the scheduler (not started: startScheduler) and
// starts the purger.
func (k *core) startBackground(b background) error {
	if b.Scheduler {
		sch, err := schedule.New(schedule.Config{Store: k.store, Owner: b.Owner, Clock: b.Clock,
			LeaseDuration: b.SchedulerLease, Interval: b.SchedulerInterval,
			Version: b.Version, Started: b.Started, Logger: b.Logger})
		if err != nil {
			return err
		}
		k.scheduler = sch
	}
	if b.RetentionInterval >= 0 {
		k.purger = retention.New(retention.Config{Store: k.store, Interval: b.RetentionInterval,
			Logger: b.Logger, Clock: b.Clock})
		k.purger.Start()
	}
	return nil
}

// startScheduler starts firing the schedules, if the core has a scheduler.
func (k *core) startScheduler() {
	if k.scheduler != nil {
		k.scheduler.Start()
	}
}

// stopScheduler stops the scheduler: first, at shutdown, so that its lease
// passes to another process at once.
func (k *core) stopScheduler(ctx context.Context) error {
	if k.scheduler == nil {
		return nil
	}
	if err := k.scheduler.Stop(ctx); err != nil {
		return fmt.Errorf("stopping scheduler: %w", err)
	}
	return nil
}

// stopPurger stops the purger: a batch in flight is cancelled, deleting
// nothing or all of its runs.
func (k *core) stopPurger() {
	if k.purger != nil {
		k.purger.Stop()
	}
}

func (k *core) closeStore() error {
	if k.ownsStore {
		return k.store.Close()
	}
	return nil
}

// queueDefaults returns the cache of queues' default retry policies, made on
// first use.
func (k *core) queueDefaults() *queuedefaults.Cache {
	if k.queues == nil {
		k.queues = queuedefaults.New(k.store, k.logger)
	}
	return k.queues
}
