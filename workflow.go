package trellis

import (
	"fmt"
	"maps"
	"slices"
	"sync"

	"github.com/trellis-dev/trellis/internal/engine"
	"github.com/trellis-dev/trellis/store"
)

// Workflow is a named, typed workflow function. Create one with NewWorkflow and
// register it with Client.Register on every process that runs it.
type Workflow[In, Out any] struct {
	name string
	fn   func(*Context, In) (Out, error)
	opts WorkflowOptions
}

// WorkflowOptions configure a workflow.
type WorkflowOptions struct {
	// Version is stamped on every run at start; the run keeps it for life, and
	// Context.Version returns it, so code can branch on the version a run began with.
	// It is also the version a worker that registered the workflow serves to
	// runs pinned to a version (StartOptions.Version): such a run goes only to
	// a worker that serves its version. 0 to store.MaxVersion.
	Version int
	// AlsoServes lists older versions (1 to store.MaxVersion) that this code
	// still runs correctly, branching on Context.Version: a worker that
	// registered the workflow also takes the runs pinned to them. Runs that
	// are not pinned go to any worker of the workflow, whatever its version.
	// See docs/versioning.md.
	AlsoServes []int
	// Queue is the default queue of its runs; "" means "default".
	Queue string
	// Retry, when set, retries a run whose workflow function fails: after a
	// backoff, the run is attempted again, replaying what it recorded and
	// running its failed steps again, until the policy's MaxAttempts (which
	// counts the first attempt; 0 means 3). nil, the default: a run fails on
	// its first failure. Cancellations, deadlines and non-retryable errors are
	// never retried. Its Backoff must be Exponential or Fixed (the store
	// computes the delays). StartOptions.Retry replaces it for one run. See
	// docs/workflow-retries.md.
	Retry *RetryPolicy
}

// NewWorkflow defines a workflow. The name identifies it in storage and must stay
// stable across deploys. More than one WorkflowOptions panics with an
// ErrInvalidOptions error, as regexp.MustCompile panics on a bad pattern: at
// the definition, before any run.
func NewWorkflow[In, Out any](name string, fn func(*Context, In) (Out, error), opts ...WorkflowOptions) *Workflow[In, Out] {
	return &Workflow[In, Out]{name: name, fn: fn, opts: mustOneOption("trellis.NewWorkflow", opts)}
}

// Name returns the workflow's name.
func (w *Workflow[In, Out]) Name() string { return w.name }

// Registrable is implemented by *Workflow; it lets Register accept workflows of any
// input and output types.
type Registrable interface {
	Name() string
	definition() *definition
}

// definition is the type-erased form of a workflow: what the engine runs (eng)
// and what starting a run needs.
type definition struct {
	name    string
	opts    WorkflowOptions
	eng     engine.Definition
	checkIn func(codec Codec, input []byte) error
	// retryErr is why opts.Retry cannot be used (Register reports it).
	retryErr error
}

func (w *Workflow[In, Out]) definition() *definition {
	retry, retryErr := w.opts.Retry.runRetry()
	d := w.newDefinition()
	d.eng.Retry, d.retryErr = retry, retryErr
	return d
}

func (w *Workflow[In, Out]) newDefinition() *definition {
	return &definition{
		name: w.name,
		opts: w.opts,
		eng: engine.Definition{Name: w.name, Run: func(rs *engine.RunState, input []byte) ([]byte, error) {
			var in In
			codec := rs.Codec()
			if err := codec.Unmarshal(input, &in); err != nil {
				return nil, fmt.Errorf("%w: %v", ErrInvalidInput, err)
			}
			out, err := w.fn(&Context{rs: rs}, in)
			if err != nil {
				return nil, err
			}
			return codec.Marshal(out)
		}},
		checkIn: func(codec Codec, input []byte) error {
			var in In
			if err := codec.Unmarshal(input, &in); err != nil {
				return fmt.Errorf("%w: %v", ErrInvalidInput, err)
			}
			return nil
		},
	}
}

// registry holds the workflows a client knows.
type registry struct {
	mu   sync.RWMutex
	defs map[string]*definition
	// served maps each workflow to the versions the worker serves to pinned
	// runs (its Version and AlsoServes). It is replaced, never changed, so
	// that each claim reads it without a copy.
	served map[string][]int
}

// servedVersions are the versions of d a worker serves: its Version, then
// AlsoServes.
func servedVersions(d *definition) ([]int, error) {
	v := d.opts.Version
	if v < 0 || v > store.MaxVersion {
		return nil, fmt.Errorf("registering workflow %q: %w: Version %d is not 0 to %d", d.name, ErrInvalidParams, v, store.MaxVersion)
	}
	out := []int{v}
	for _, o := range d.opts.AlsoServes {
		if o < 1 || o > store.MaxVersion {
			return nil, fmt.Errorf("registering workflow %q: %w: AlsoServes: version %d is not 1 to %d", d.name, ErrInvalidParams, o, store.MaxVersion)
		}
		if !slices.Contains(out, o) {
			out = append(out, o)
		}
	}
	return out, nil
}

func (r *registry) add(d *definition) error {
	if d.name == "" {
		return fmt.Errorf("registering workflow: empty name")
	}
	if d.retryErr != nil {
		return fmt.Errorf("registering workflow %q: WorkflowOptions.Retry: %w", d.name, d.retryErr)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.defs == nil {
		r.defs = make(map[string]*definition)
	}
	if _, dup := r.defs[d.name]; dup {
		return fmt.Errorf("registering workflow %q: already registered", d.name)
	}
	vs, err := servedVersions(d)
	if err != nil {
		return err
	}
	r.defs[d.name] = d
	served := maps.Clone(r.served)
	if served == nil {
		served = map[string][]int{}
	}
	served[d.name] = vs
	r.served = served
	return nil
}

// versions returns the versions served of each registered workflow
// (worker.Config.Versions); the caller must not change the map.
func (r *registry) versions() map[string][]int {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.served
}

// serves reports whether a worker of these workflows takes the run p
// creates: a registered workflow and, for a pinned run, a version it serves.
func (r *registry) serves(p *store.RunCreateParams) bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	vs, ok := r.served[p.Workflow]
	return ok && (!p.Pinned || slices.Contains(vs, p.Version))
}

func (r *registry) get(name string) (*definition, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	d, ok := r.defs[name]
	return d, ok
}

// lookup returns the engine's form of a registered workflow.
func (r *registry) lookup(name string) (*engine.Definition, bool) {
	d, ok := r.get(name)
	if !ok {
		return nil, false
	}
	return &d.eng, true
}

func (r *registry) names() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]string, 0, len(r.defs))
	for n := range r.defs {
		out = append(out, n)
	}
	return out
}
