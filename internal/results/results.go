// Package results delivers runs' final states to the callers waiting for them
// (Handle.Result, Client.Wait): one watcher per client follows every waited-for
// run at once, so that waiting costs no goroutine, no subscription and no query
// per caller.
//
// A caller registers its run, then the watcher reads the run once (batched with
// every other registration since its last read), unless the run's end will be
// reported to Ended (Config.Local) or the run was created by this process and
// has not changed since (Created). After that the run is read again
// only when the store's feed (store.RunWatcher) says it changed, together with
// every other changed run, in one RunsGet per batch of up to BatchSize runs. When
// the feed does not carry other processes' commits (SQLite), or the store has no
// feed, every waited-for run is also re-read once per PollInterval, batched: one
// query per BatchSize waited-for runs per interval, whatever the number of callers;
// a store that tells whether anyone else committed since (store.ForeignCommits,
// SQLite) is re-read only when someone did.
package results

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/trellis-dev/trellis/store"
)

// BatchSize caps the runs of one RunsGet.
const BatchSize = 500

// Config configures a Watcher.
type Config struct {
	Store     store.Store
	Namespace string
	// PollInterval is how often waited-for runs are re-read when the store's
	// feed does not carry other processes' commits. Default 1s.
	PollInterval time.Duration
	Logger       *slog.Logger
	// Executing, when set, reports whether a run executes in this process: its
	// end is reported to Ended, so a change the feed reports for it is not read
	// from the store.
	Executing func(runID string) bool
	// Local, when set, reports whether a run's end will be reported to Ended
	// if it comes through this process (a server's run pushed to one of its
	// remote workers): a caller that registers for such a run is not read
	// then, as the run is not final yet. It must turn false once the run's
	// end is committed and before Ended is called with it, so that a caller
	// registering in between is read; a run that ends elsewhere is read when
	// the feed or the poll reports it changed, as any other.
	Local func(runID string) bool
}

// Watcher follows the runs callers wait for. Start it once; Stop is idempotent.
type Watcher struct {
	cfg      Config
	kick     chan struct{} // coalesced: registrations to read
	stopping chan struct{}
	done     chan struct{}
	ctx      context.Context // of reads; cancelled by Stop
	cancel   context.CancelFunc
	start    sync.Once
	stop     sync.Once
	started  bool

	feed         store.RunFeed // nil when the store has none
	crossProcess bool
	poll         store.ForeignPoll // Start, then the loop's goroutine only

	mu      sync.Mutex
	waiters map[string][]chan outcome // run ID -> callers waiting
	fresh   map[string]struct{}       // registered since the last read: read whatever their state
	closed  bool

	// What lets a run this process created go unread when a caller
	// registers for it (Created): checks counts the checks of the feed;
	// unwaited holds the runs the feed reported while nobody waited for
	// them, since check forgot (the set is emptied when it grows too big,
	// and kept only while some created run awaits its caller);
	// allAt is the last check that re-read every waited-for run (signals
	// lost, other processes' commits); created maps a created run to the
	// check count before its create began (Mark); marking counts the Marks
	// whose Created has not come yet.
	checks   uint64
	marking  int
	unwaited map[string]struct{}
	forgot   uint64
	allAt    uint64
	created  map[string]uint64
}

// maxRemembered caps Watcher.unwaited and Watcher.created (about 1 MiB
// each): past it a set is emptied, and the runs it held are read when waited
// for, as any other.
const maxRemembered = 1 << 14

type outcome struct {
	id  string // the run's ID: a channel may wait for several (WaitEach)
	run *store.Run
	err error
}

// New returns a watcher; it does nothing until Start.
func New(cfg Config) (*Watcher, error) {
	if cfg.Store == nil {
		return nil, errors.New("results config: Store is required")
	}
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Watcher{
		cfg: cfg, ctx: ctx, cancel: cancel, kick: make(chan struct{}, 1), stopping: make(chan struct{}), done: make(chan struct{}),
		waiters: make(map[string][]chan outcome), fresh: make(map[string]struct{}),
		unwaited: make(map[string]struct{}), created: make(map[string]uint64),
		poll: store.NewForeignPoll(cfg.Store),
	}, nil
}

// Start starts following the store's feed, on one goroutine that Stop ends.
func (w *Watcher) Start() {
	w.start.Do(func() {
		if rw, ok := w.cfg.Store.(store.RunWatcher); ok {
			w.feed, w.crossProcess = rw.WatchRuns(w.cfg.Namespace)
		}
		if w.feed == nil || !w.crossProcess {
			// The store's mark as the watcher starts (before any Created
			// can count), so that the first poll with callers re-reads
			// every waited-for run only if a commit the feed does not carry
			// came since. Without it the first poll always did, and every
			// run created before it was read as its caller registered:
			// through a server on SQLite, w1's 20,000 runs started at once
			// were nearly all read (18,000-20,000 reads, 7% of the server's
			// CPU; 1 Dec 2026).
			w.poll.Due(w.ctx)
		}
		w.started = true
		go w.loop()
	})
}

// Stop ends the watcher; callers still waiting get store.ErrClosed. Call it before
// closing the store.
func (w *Watcher) Stop() {
	w.stop.Do(func() {
		close(w.stopping)
		w.cancel()
		w.start.Do(func() {}) // a Start after Stop starts nothing
		if w.started {
			<-w.done
		}
		w.closeAll()
	})
}

// Wait blocks until the run with this run ID is in a final state and returns it,
// or until ctx is done. store.ErrRunNotFound when no such run exists.
func (w *Watcher) Wait(ctx context.Context, runID string) (*store.Run, error) {
	ch := make(chan outcome, 1)
	if !w.register(runID, ch) {
		return nil, fmt.Errorf("waiting for run %s: %w", runID, store.ErrClosed)
	}
	select {
	case o := <-ch:
		return o.run, o.err
	case <-ctx.Done():
		w.unregister(runID, ch)
		return nil, ctx.Err()
	}
}

// WaitEach waits for every run of ids (run IDs, each once) to end, calling
// ended from the calling goroutine for each as it does (run set) or as it is
// found not to exist (run nil), and idle whenever none more is at hand (a
// caller that writes each run out flushes then). It returns nil once every run
// was reported, ctx's error when ctx ended first (the runs reported by then
// were), or the error of a read that failed. One channel takes every outcome,
// so a caller waiting for a hundred runs costs what one waiting for one does.
func (w *Watcher) WaitEach(ctx context.Context, ids []string, ended func(id string, run *store.Run), idle func()) error {
	ch := make(chan outcome, len(ids))
	for i, id := range ids {
		if !w.register(id, ch) {
			for _, id := range ids[:i] {
				w.unregister(id, ch)
			}
			return fmt.Errorf("waiting for runs: %w", store.ErrClosed)
		}
	}
	left := len(ids)
	got := func(o outcome) error {
		left--
		switch {
		case o.err == nil:
			ended(o.id, o.run)
		case errors.Is(o.err, store.ErrRunNotFound):
			ended(o.id, nil)
		default:
			return o.err
		}
		return nil
	}
	var err error
	for left > 0 && err == nil {
		select {
		case o := <-ch:
			err = got(o)
			for more := true; more && left > 0 && err == nil; {
				select {
				case o := <-ch:
					err = got(o)
				default:
					more = false
				}
			}
			if err == nil {
				idle()
			}
		case <-ctx.Done():
			err = ctx.Err()
		}
	}
	if left == 0 && err == nil {
		return nil
	}
	// The runs not reported: no outcome reaches ch once they are
	// unregistered (outcomes are sent under w.mu); one sent before is
	// reported still, when the wait ended for ctx.
	for _, id := range ids {
		w.unregister(id, ch)
	}
	if err != nil && err == ctx.Err() {
		for {
			select {
			case o := <-ch:
				_ = got(o) // a failed read's, after ctx ended: the wait is over anyway
			default:
				idle()
				return err
			}
		}
	}
	return err
}

func (w *Watcher) register(runID string, ch chan outcome) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return false
	}
	w.waiters[runID] = append(w.waiters[runID], ch)
	if w.cfg.Local != nil && w.cfg.Local(runID) {
		return true // Ended reports it (under w.mu: after this registration)
	}
	if mark, ok := w.created[runID]; ok {
		delete(w.created, runID)
		if _, changed := w.unwaited[runID]; !changed && w.forgot <= mark && w.allAt <= mark {
			return true // as created: the feed reports its change
		}
	}
	w.fresh[runID] = struct{}{}
	w.signal()
	return true
}

func (w *Watcher) unregister(runID string, ch chan outcome) {
	w.mu.Lock()
	defer w.mu.Unlock()
	chs := w.waiters[runID]
	for i, c := range chs {
		if c == ch {
			chs = append(chs[:i:i], chs[i+1:]...)
			break
		}
	}
	if len(chs) == 0 {
		delete(w.waiters, runID)
		delete(w.fresh, runID)
		return
	}
	w.waiters[runID] = chs
}

// Mark returns what Created needs: call it before the create of the runs
// begins, and Created once it is over, whatever its outcome.
func (w *Watcher) Mark() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.marking++
	return w.checks
}

// Created tells the watcher of runs this process just created (ids; none that
// existed before; none when the create failed), whose create began after mark
// (Mark), so that a caller registering for one of them later need not read it:
// every change of a run reaches the feed, and a change the feed reported while
// nobody waited for the run is remembered (unwaited). The run is read as usual
// when the feed has reported it, when the remembered changes were emptied
// since mark, when a check since mark re-read everything (lost signals; other
// processes' commits, which the feed of a SQLite store does not carry: the
// poll that found them re-read only the runs waited for then), and on a store
// without a feed. A create that publishes its run's topic (RunCreate) gains
// nothing: its own report makes the run read; a batch's (RunsCreate)
// publishes none.
func (w *Watcher) Created(ids []string, mark uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.marking--
	if w.feed == nil || w.closed {
		return
	}
	for _, id := range ids {
		if len(w.created) >= maxRemembered {
			clear(w.created)
		}
		w.created[id] = mark
	}
}

// Waiting returns how many runs have callers waiting (for tests and metrics).
func (w *Watcher) Waiting() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.waiters)
}

// Ended takes the outcome of a run that executed in this process (the engine's
// OnEnd): its callers get final, without a read, when the run finished; else the
// run is read again, as its change may have been skipped while it executed.
func (w *Watcher) Ended(runID string, final *store.Run) {
	w.mu.Lock()
	defer w.mu.Unlock()
	chs, ok := w.waiters[runID]
	switch {
	case !ok:
	case final != nil && final.Status.Terminal():
		for _, ch := range chs {
			c := *final
			ch <- outcome{id: runID, run: &c}
		}
		delete(w.waiters, runID)
	default:
		w.fresh[runID] = struct{}{}
		w.signal()
	}
}

func (w *Watcher) signal() {
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

func (w *Watcher) closeAll() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.closed = true
	for id, chs := range w.waiters {
		for _, ch := range chs {
			ch <- outcome{id: id, err: fmt.Errorf("waiting for run %s: %w", id, store.ErrClosed)}
		}
	}
	clear(w.waiters)
	clear(w.fresh)
}
