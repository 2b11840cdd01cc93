package store

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// WorkerRegistry is the role of the contract through which workers make themselves
// known: each worker keeps a record of what it serves, refreshed by its heartbeat, so
// that clients can tell a run nobody serves from one that merely waits its turn.
type WorkerRegistry interface {
	// WorkerHeartbeat creates or refreshes the record of a worker (namespace and
	// name): its workflows, queues and version, last seen now, live until now + TTL.
	// With Start, the record's StartedAt becomes now and the namespace's records
	// dead for longer than WorkerForgetAfter are deleted. A live record belongs
	// to the Owner that made it: a heartbeat of another owner fails with
	// ErrWorkerOwned and writes nothing, but one without an owner (a worker on
	// the store itself) always applies and takes the record over, and a dead
	// record (past its TTL) is anyone's.
	WorkerHeartbeat(ctx context.Context, p *WorkerHeartbeatParams) error
	// WorkerList lists the records of a namespace's workers, live or not, by name.
	WorkerList(ctx context.Context, p *WorkerListParams) ([]*Worker, error)
	// WorkerRemove deletes a worker's record (on graceful stop). Removing a record
	// that does not exist is not an error; removing another owner's live record
	// fails with ErrWorkerOwned (a caller without an owner may remove any).
	WorkerRemove(ctx context.Context, p *WorkerRemoveParams) error
}

// WorkerForgetAfter is how long a record of a worker that stopped heartbeating (it
// crashed, or its stop could not remove it) stays listed before a starting worker
// of its namespace deletes it.
const WorkerForgetAfter = time.Hour

// Worker is the record of a worker process.
type Worker struct {
	Namespace string `json:"namespace"`
	// Name is the worker's lease-owner name (Run.LeaseOwner of its runs).
	Name string `json:"name"`
	// Workflows are the workflow names the worker runs.
	Workflows []string `json:"workflows"`
	// Queues are the queues it claims from; empty means every queue.
	Queues []string `json:"queues"`
	// Versions maps each workflow to the workflow versions the worker serves
	// to runs pinned to a version (RunsClaimParams.Versions); a workflow
	// without an entry gets none of its pinned runs.
	Versions map[string][]int `json:"versions,omitempty"`
	// Version is the version of the worker's binary or SDK, free text.
	Version    string    `json:"version"`
	StartedAt  time.Time `json:"started_at"`
	LastSeenAt time.Time `json:"last_seen_at"`
	// ExpiresAt is when the worker stops counting as live unless it heartbeats.
	ExpiresAt time.Time `json:"expires_at"`
	// Live reports ExpiresAt > now by the store's clock when the record was read.
	Live bool `json:"live"`
	// Owner is the principal whose worker made the record, through a server;
	// "" for a worker on the store itself.
	Owner string `json:"owner,omitempty"`
}

// Serves reports whether the worker runs workflow wf from queue q.
func (w *Worker) Serves(wf, q string) bool {
	return slices.Contains(w.Workflows, wf) && (len(w.Queues) == 0 || slices.Contains(w.Queues, q))
}

// ServesRun reports whether the worker claims run: its workflow from its queue
// and, for a pinned run, its version.
func (w *Worker) ServesRun(run *Run) bool {
	return w.Serves(run.Workflow, run.Queue) && (!run.Pinned || slices.Contains(w.Versions[run.Workflow], run.Version))
}

// WorkerHeartbeatParams are the parameters of WorkerHeartbeat.
type WorkerHeartbeatParams struct {
	Namespace string   `json:"namespace"`
	Name      string   `json:"name"`
	Workflows []string `json:"workflows"`
	Queues    []string `json:"queues,omitempty"`
	// Versions are the workflow versions the worker serves (Worker.Versions).
	Versions map[string][]int `json:"versions,omitempty"`
	Version  string           `json:"version,omitempty"`
	// TTL is how long the worker counts as live after this heartbeat; a worker
	// passes its lease duration, after which its runs are taken over anyway.
	TTL time.Duration `json:"ttl"`
	// Start marks the worker's first heartbeat (see WorkerHeartbeat).
	Start bool `json:"start,omitempty"`
	// Owner is the principal the heartbeat comes from, set by a server from
	// the caller's credentials ("" on the store itself: trusted).
	Owner string `json:"-"`
}

// Validate reports the first missing or malformed field of p, wrapping
// ErrInvalidParams.
func (p *WorkerHeartbeatParams) Validate() error {
	switch {
	case p.Namespace == "":
		return fmt.Errorf("%w: Namespace is required", ErrInvalidParams)
	case p.Name == "":
		return fmt.Errorf("%w: Name is required", ErrInvalidParams)
	case p.TTL <= 0:
		return fmt.Errorf("%w: TTL must be positive", ErrInvalidParams)
	case slices.Contains(p.Workflows, ""):
		return fmt.Errorf("%w: Workflows: empty workflow name", ErrInvalidParams)
	case slices.Contains(p.Queues, ""):
		return fmt.Errorf("%w: Queues: empty queue name", ErrInvalidParams)
	}
	return ValidateVersions(p.Versions)
}

// WorkerListParams are the parameters of WorkerList.
type WorkerListParams struct {
	Namespace string `json:"namespace"`
}

// WorkerRemoveParams are the parameters of WorkerRemove.
type WorkerRemoveParams struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// Owner, as for WorkerHeartbeatParams.
	Owner string `json:"-"`
}

// UnservedReason is the wait reason of a pending run that no live worker among
// workers (the records of the run's namespace) serves: `no live worker serves
// workflow "x"`, or `... on queue "q"` when live workers serve the workflow on
// other queues only, or, for a run pinned to a version (Run.Pinned) that the
// live workers of its workflow and queue do not serve, `version 3 of workflow
// "x" is served by no live worker; live workers serve version 2` (or "serve no
// pinned version" when they list none). It is "" when a live worker serves the
// run.
func UnservedReason(run *Run, workers []*Worker) string {
	onOtherQueues, onQueue := false, false
	var versions []int
	for _, w := range workers {
		if !w.Live || w.Namespace != run.Namespace {
			continue
		}
		if w.ServesRun(run) {
			return ""
		}
		if w.Serves(run.Workflow, run.Queue) {
			onQueue = true
			versions = append(versions, w.Versions[run.Workflow]...)
		}
		onOtherQueues = onOtherQueues || slices.Contains(w.Workflows, run.Workflow)
	}
	switch {
	case onQueue:
		return fmt.Sprintf("version %d of workflow %q is served by no live worker; live workers serve %s",
			run.Version, run.Workflow, versionList(versions))
	case onOtherQueues:
		return fmt.Sprintf("no live worker serves workflow %q on queue %q", run.Workflow, run.Queue)
	}
	return fmt.Sprintf("no live worker serves workflow %q", run.Workflow)
}

// versionList says which versions vs are: "version 2", "versions 1, 2 and 3",
// "no pinned version".
func versionList(vs []int) string {
	vs = slices.Compact(slices.Sorted(slices.Values(vs)))
	switch len(vs) {
	case 0:
		return "no pinned version"
	case 1:
		return "version " + strconv.Itoa(vs[0])
	}
	parts := make([]string, len(vs))
	for i, v := range vs {
		parts[i] = strconv.Itoa(v)
	}
	return "versions " + strings.Join(parts[:len(parts)-1], ", ") + " and " + parts[len(parts)-1]
}

// ExplainRun is ExplainPending for the result of a RunGet.
func ExplainRun(ctx context.Context, reg WorkerRegistry, namespace string, r *Run, err error) (*Run, error) {
	if err == nil {
		err = ExplainPending(ctx, reg, namespace, r)
	}
	if err != nil {
		return nil, err
	}
	return r, nil
}

// ExplainPage is ExplainPending for the result of a RunList.
func ExplainPage(ctx context.Context, reg WorkerRegistry, namespace string, res *RunListResult, err error) (*RunListResult, error) {
	if err == nil {
		err = ExplainPending(ctx, reg, namespace, res.Runs...)
	}
	if err != nil {
		return nil, err
	}
	return res, nil
}

// ExplainPending gives each pending run of namespace that has no wait reason of its
// own the UnservedReason computed from the namespace's worker records, read from reg
// only when some run needs them. RunGet and RunList of every driver call it, so a run
// whose workflow no worker serves (a forgotten Register, a worker on other queues,
// every worker gone) says so instead of staying silently pending. The reason is
// computed at read time and never stored.
func ExplainPending(ctx context.Context, reg WorkerRegistry, namespace string, runs ...*Run) error {
	if !slices.ContainsFunc(runs, unexplained) {
		return nil
	}
	workers, err := reg.WorkerList(ctx, &WorkerListParams{Namespace: namespace})
	if err != nil {
		return err
	}
	for _, r := range runs {
		if unexplained(r) {
			r.WaitReason = UnservedReason(r, workers)
		}
	}
	return nil
}

func unexplained(r *Run) bool { return r.Status == StatusPending && r.WaitReason == "" }

// PinVersion is the version the run is pinned to, 0 when it is not pinned
// (how the stores hold Pinned: a pin_version column).
func (r *Run) PinVersion() int {
	if r.Pinned {
		return r.Version
	}
	return 0
}

// VersionsJSON encodes a worker's versions for a store's column: a JSON object
// of workflow name to versions ("{}" for none).
func VersionsJSON(vs map[string][]int) (string, error) {
	if len(vs) == 0 {
		return "{}", nil
	}
	b, err := json.Marshal(vs)
	return string(b), err
}

// VersionsFromJSON decodes a column that VersionsJSON wrote; nil for none.
func VersionsFromJSON(text string) (map[string][]int, error) {
	var vs map[string][]int
	if err := json.Unmarshal([]byte(text), &vs); err != nil {
		return nil, fmt.Errorf("decoding worker versions: %w", err)
	}
	if len(vs) == 0 {
		return nil, nil
	}
	return vs, nil
}

// PinVersion is the version the run p creates is pinned to, 0 when none.
func (p *RunCreateParams) PinVersion() int {
	if p.Pinned {
		return p.Version
	}
	return 0
}
