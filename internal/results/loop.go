package results

import (
	"context"
	"fmt"
	"time"

	"github.com/trellis-dev/trellis/store"
)

// loop reads runs when callers register, when the feed reports changes and, for
// stores whose feed misses other processes' commits, every PollInterval.
func (w *Watcher) loop() {
	defer close(w.done)
	var changed <-chan struct{}
	if w.feed != nil {
		defer w.feed.Stop()
		changed = w.feed.Changed()
	}
	var poll <-chan time.Time
	if w.feed == nil || !w.crossProcess {
		// Wall time, as a caller's wait is: a fake clock must not hold it.
		t := time.NewTicker(w.cfg.PollInterval)
		defer t.Stop()
		poll = t.C
	}
	for {
		all := false
		select {
		case <-w.stopping:
			return
		case <-w.kick:
		case <-changed:
		case <-poll:
			if all = w.othersCommitted(); !all {
				continue
			}
		}
		w.check(w.ctx, all)
	}
}

// othersCommitted reports whether a poll must re-read every waited-for run: a
// commit the feed does not carry may have happened since the last poll that
// said so. It is asked at every poll, callers waiting or not: a poll without
// any keeps the store's mark current (one reading, shared by the store's
// pollers), and its check of everything reads nothing but makes the runs
// created before it read when they are waited for (Created), as they must be
// (the foreign commit may have changed them). Asked only while callers
// waited, the first poll after a quiet spell compared with a mark from before
// it and re-read every caller's run.
func (w *Watcher) othersCommitted() bool {
	return w.poll.Due(w.ctx)
}

// check reads the runs registered since the last check, and the waited-for runs
// the feed reports changed (all of them when all, or when the feed may have lost
// signals), in the same queries, and hands the final ones to their callers.
// (Reading only the final ones among those reported changed would take a
// second query per check; most of them are final anyway: a run's topic is not
// signalled while it runs.)
func (w *Watcher) check(ctx context.Context, all bool) {
	var ids []string
	if w.feed != nil {
		var lost bool
		ids, lost = w.feed.Take()
		all = all || lost
	}
	fresh, changed := w.due(ids, all)
	w.read(ctx, append(fresh, changed...))
}

// due splits the runs to read: those registered since the last check, and the
// other waited-for runs among ids (or all of them).
func (w *Watcher) due(ids []string, all bool) (fresh, changed []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.checks++
	if all {
		w.allAt = w.checks
	}
	switch {
	case len(w.created) == 0 && w.marking == 0:
		// No created run awaits its caller, and no create is under way:
		// nothing to remember for.
		if len(w.unwaited) > 0 {
			clear(w.unwaited)
			w.forgot = w.checks
		}
	default:
		for _, id := range ids {
			if _, waited := w.waiters[id]; !waited {
				if len(w.unwaited) >= maxRemembered {
					clear(w.unwaited)
					w.forgot = w.checks
				}
				w.unwaited[id] = struct{}{}
			}
		}
	}
	fresh = make([]string, 0, len(w.fresh))
	for id := range w.fresh {
		fresh = append(fresh, id)
	}
	if all {
		ids = ids[:0]
		for id := range w.waiters {
			ids = append(ids, id)
		}
	}
	for _, id := range ids {
		_, waited := w.waiters[id]
		if _, isFresh := w.fresh[id]; waited && !isFresh && !w.executing(id, all) {
			changed = append(changed, id)
		}
	}
	clear(w.fresh)
	return fresh, changed
}

// executing reports whether a changed run executes here, so that Ended will
// report its outcome. A full re-read (all) checks every run regardless.
func (w *Watcher) executing(runID string, all bool) bool {
	return !all && w.cfg.Executing != nil && w.cfg.Executing(runID)
}

// read reads ids in batches and hands every final run to its callers; a run
// that does not exist fails its callers with ErrRunNotFound, a failed read fails
// the callers of its batch.
func (w *Watcher) read(ctx context.Context, ids []string) {
	for len(ids) > 0 {
		batch := ids[:min(len(ids), BatchSize)]
		ids = ids[len(batch):]
		runs, err := w.cfg.Store.RunsGet(ctx, &store.RunsGetParams{Namespace: w.cfg.Namespace, IDs: batch})
		if err != nil {
			if ctx.Err() != nil {
				return // stopping: Stop fails every caller
			}
			w.cfg.Logger.Warn("reading waited-for runs", "runs", len(batch), "err", err)
			w.fail(batch, err)
			continue
		}
		w.deliver(runs)
		if len(runs) < len(batch) {
			w.notFound(batch, runs)
		}
	}
}

func (w *Watcher) deliver(runs []*store.Run) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, r := range runs {
		if !r.Status.Terminal() {
			continue
		}
		for _, ch := range w.waiters[r.ID] {
			c := *r
			ch <- outcome{id: r.ID, run: &c}
		}
		delete(w.waiters, r.ID)
	}
}

func (w *Watcher) notFound(batch []string, found []*store.Run) {
	seen := make(map[string]bool, len(found))
	for _, r := range found {
		seen[r.ID] = true
	}
	var missing []string
	for _, id := range batch {
		if !seen[id] {
			missing = append(missing, id)
		}
	}
	w.fail(missing, store.ErrRunNotFound)
}

func (w *Watcher) fail(ids []string, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, id := range ids {
		for _, ch := range w.waiters[id] {
			ch <- outcome{id: id, err: fmt.Errorf("waiting for run %s: %w", id, err)}
		}
		delete(w.waiters, id)
	}
}
