package trellis

import (
	"context"
	"fmt"
	"sync"
	"time"

	servercore "github.com/trellis-dev/trellis/internal/core"
	"github.com/trellis-dev/trellis/internal/results"
	"github.com/trellis-dev/trellis/store"
)

// serverCore is a server's core (internal/core): one core on the server's
// store for every namespace, whose clients are made for each request.
type serverCore struct {
	*core
	cfg   Config // of the clients, but for Namespace
	chain *chain // the clients' interceptors: the built-in metrics and tracing
}

func init() { servercore.Open = openServerCore }

func openServerCore(kc servercore.Config) (servercore.Core, error) {
	cfg := Config{Backend: kc.Store, MaxPayloadBytes: kc.MaxPayloadBytes, Logger: kc.Logger,
		TracerProvider: kc.TracerProvider, Clock: kc.Clock, Worker: WorkerOptions{Disabled: true}}
	if kc.Metrics != nil {
		cfg.Metrics = kc.Metrics.(*Metrics)
	}
	cfg = cfg.withDefaults()
	k := &serverCore{core: &core{store: kc.Store, logger: cfg.Logger, watchers: watchers{executing: kc.Executing, pushed: kc.Pushed}},
		cfg: cfg, chain: newChain(cfg.interceptors())}
	if err := k.startBackground(background{Scheduler: kc.Scheduler, Owner: kc.Owner,
		SchedulerLease: kc.SchedulerLease, SchedulerInterval: kc.SchedulerInterval, Started: kc.Started,
		RetentionInterval: kc.RetentionInterval, Clock: kc.Clock, Logger: cfg.Logger}); err != nil {
		return nil, err
	}
	return k, nil
}

func (k *serverCore) Client(ns string, cs servercore.Calls) any {
	c := &Client{cfg: k.cfg, chain: k.chain}
	c.cfg.Namespace = ns
	c.b = &embedded{core: k.core, cfg: &c.cfg, reg: &c.reg, calls: calls{idem: cs.Idempotency, handoff: cs.Handoff}}
	return c
}

func (k *serverCore) WaitRuns(ctx context.Context, ns string, ids []string, ended func(id string, run any), idle func()) error {
	w, release, err := k.watcher(ns, k.cfg.Worker.PollInterval)
	if err != nil {
		return err
	}
	defer release()
	return w.WaitEach(ctx, ids, func(id string, run *store.Run) {
		if run == nil {
			ended(id, nil)
			return
		}
		ended(id, runFromStore(run))
	}, idle)
}

func (k *serverCore) Ended(ns, runID string, final *store.Run) {
	k.mu.Lock()
	w := k.byNS[ns]
	k.mu.Unlock()
	if w != nil {
		w.Ended(runID, final)
	}
}

func (k *serverCore) StartScheduler()                         { k.startScheduler() }
func (k *serverCore) StopScheduler(ctx context.Context) error { return k.stopScheduler(ctx) }
func (k *serverCore) StopPurger()                             { k.stopPurger() }

func (k *serverCore) Close() {
	k.stopPurger()
	k.mu.Lock()
	ws := k.byNS
	k.byNS, k.closed = nil, true
	k.mu.Unlock()
	for _, w := range ws {
		w.Stop()
	}
}

// maxWatchers bounds the namespaces a server's core keeps a results watcher
// for; beyond it, a wait gets a watcher of its own, stopped when it ends.
const maxWatchers = 1024

// watchers are the results watchers of a server's core, by namespace, made
// by the first wait in the namespace: waits of one namespace share one
// batched read of the runs waited for.
type watchers struct {
	mu     sync.Mutex
	byNS   map[string]*results.Watcher
	closed bool
	// executing is the server's servercore.Config.Executing (nil: none).
	executing func(ns, runID string) bool
	// pushed is the server's servercore.Config.Pushed (nil: none).
	pushed func(ns, runID string) bool
}

// keptWatcher returns the lasting results watcher of namespace ns, or nil
// when there is none yet (it is made by the first wait in the namespace).
func (k *core) keptWatcher(ns string) *results.Watcher {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.closed {
		return nil
	}
	return k.byNS[ns]
}

// watcher returns the results watcher of namespace ns and a function to call
// when the wait is over.
func (k *core) watcher(ns string, poll time.Duration) (*results.Watcher, func(), error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.closed {
		return nil, nil, fmt.Errorf("waiting for a run: %w", ErrClosed)
	}
	if w, ok := k.byNS[ns]; ok {
		return w, func() {}, nil
	}
	cfg := results.Config{Store: k.store, Namespace: ns, PollInterval: poll, Logger: k.logger}
	if ex := k.executing; ex != nil {
		cfg.Executing = func(runID string) bool { return ex(ns, runID) }
	}
	kept := len(k.byNS) < maxWatchers
	if pu := k.pushed; pu != nil && kept { // Ended reaches only the kept watchers
		cfg.Local = func(runID string) bool { return pu(ns, runID) }
	}
	w, err := results.New(cfg)
	if err != nil {
		return nil, nil, err
	}
	w.Start()
	if !kept {
		return w, w.Stop, nil
	}
	if k.byNS == nil {
		k.byNS = map[string]*results.Watcher{}
	}
	k.byNS[ns] = w
	return w, func() {}, nil
}
