package worker

import (
	"context"
	"fmt"
	"runtime/debug"
	"slices"
	"strings"
	"sync"

	"github.com/trellis-dev/trellis/store"
)

// record keeps the worker's record in the store (store.WorkerRegistry): written
// when the worker starts and whenever its workflows change (from the claim loop),
// refreshed at every heartbeat tick (one statement per tick, whatever the number of
// runs), and removed by a graceful Stop. Its TTL is the lease duration: a worker
// that has not heartbeated for that long has lost its runs' leases too.
//
// It is a call of its own rather than part of LeasesExtend: a worker without runs
// must heartbeat too, and the lease call stays about leases.
type record struct {
	mu         sync.Mutex // held across the store call: the loops write in turn
	registered bool       // a heartbeat with Start succeeded
	workflows  []string   // as last written, sorted
}

// stale reports whether the record must be written for these workflows (sorted).
func (r *record) stale(workflows []string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return !r.registered || !slices.Equal(r.workflows, workflows)
}

// sortedWorkflows returns the worker's workflow names in order.
func (w *Worker) sortedWorkflows() []string {
	names := slices.Clone(w.cfg.Workflows())
	slices.Sort(names)
	return names
}

// writeRecord creates or refreshes the worker's record with these workflows.
func (w *Worker) writeRecord(ctx context.Context, workflows []string) error {
	r := &w.rec
	r.mu.Lock()
	defer r.mu.Unlock()
	err := w.cfg.Store.WorkerHeartbeat(ctx, &store.WorkerHeartbeatParams{
		Namespace: w.cfg.Namespace, Name: w.cfg.Name, Workflows: workflows, Queues: w.cfg.Queues,
		Versions: w.versions(), Version: w.cfg.Version, TTL: w.cfg.LeaseDuration, Start: !r.registered,
	})
	if err != nil {
		return fmt.Errorf("recording worker: %w", err)
	}
	if !r.registered {
		w.cfg.Logger.Info("worker registered", "worker", w.cfg.Name, "namespace", w.cfg.Namespace,
			"queues", w.cfg.Queues, "version", w.cfg.Version)
	}
	if !slices.Equal(r.workflows, workflows) {
		w.cfg.Logger.Debug("worker serves", "worker", w.cfg.Name, "workflows", workflows)
	}
	r.registered, r.workflows = true, workflows
	return nil
}

// Announce writes the worker's record now if it was never written or its
// workflows changed, so that once it returns other processes see them served
// (creating a schedule of a workflow no live worker serves is refused). The claim loop
// writes the record too, before each claim, but a run that another process starts
// right after this worker registers must not race that loop.
func (w *Worker) Announce(ctx context.Context) error {
	names := w.sortedWorkflows()
	if w.stopped() || !w.rec.stale(names) {
		return nil
	}
	return w.writeRecord(ctx, names)
}

// updateRecord writes the record if it was never written or the workflows
// changed; the claim loop calls it before each claim.
func (w *Worker) updateRecord(workflows []string) {
	if !w.rec.stale(workflows) {
		return
	}
	ctx, cancel := context.WithTimeout(w.hardCtx, w.cfg.HeartbeatInterval)
	defer cancel()
	if err := w.writeRecord(ctx, workflows); err != nil && !w.stopped() {
		w.cfg.Logger.Warn("registering worker", "err", err)
	}
}

// removeRecord deletes the record on graceful stop, if it was written.
func (w *Worker) removeRecord(ctx context.Context) error {
	w.rec.mu.Lock()
	registered := w.rec.registered
	w.rec.mu.Unlock()
	if !registered {
		return nil
	}
	err := w.cfg.Store.WorkerRemove(ctx, &store.WorkerRemoveParams{Namespace: w.cfg.Namespace, Name: w.cfg.Name})
	if err != nil {
		return fmt.Errorf("removing worker record: %w", err)
	}
	return nil
}

// BuildVersion describes the running binary for Config.Version: its main module's
// version (with the VCS revision when the version is "(devel)"), and the version of
// Trellis it was built with when Trellis is a dependency.
func BuildVersion() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	var parts []string
	if bi.Main.Path != "" && bi.Main.Path != trellisModule {
		parts = append(parts, bi.Main.Path)
	}
	v := bi.Main.Version
	if v == "(devel)" || v == "" {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && s.Value != "" {
				v = "(devel) " + s.Value[:min(12, len(s.Value))]
			}
		}
	}
	parts = append(parts, v)
	for _, d := range bi.Deps {
		if d.Path == trellisModule {
			parts = append(parts, "trellis "+d.Version)
		}
	}
	return strings.TrimSpace(strings.Join(parts, " "))
}

const trellisModule = "github.com/trellis-dev/trellis"

// versions returns the versions the worker serves (Config.Versions), nil when
// none.
func (w *Worker) versions() map[string][]int {
	if w.cfg.Versions == nil {
		return nil
	}
	return w.cfg.Versions()
}
