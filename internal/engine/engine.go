// Package engine is the replay engine of Trellis: it executes one claimed run by
// calling its workflow function from the start, matching each op the code asks
// for against the run's history (position, kind, name), executing the ops history
// does not hold yet (steps with their attempts and backoffs, waits for timers,
// events, approvals and child runs), saving them in checkpoints, and stopping the
// run when it must wait, block, be handed back or be abandoned.
//
// It works on encoded values (a Codec and []byte) and concrete types; the root
// package trellis wraps it in the typed API users call. Its dependencies are
// explicit in Config: the store methods it calls, a codec, a clock, a logger,
// limits and the workflows it can run. It never reaches back into the client.
package engine

import (
	"context"
	"errors"
	"log/slog"
	"reflect"
	"time"

	"github.com/trellis-dev/trellis/internal/clock"
	"github.com/trellis-dev/trellis/store"
)

// Store is the part of the storage contract's worker role that the engine calls.
// A store that also implements store.TxCheckpointer runs transactional steps.
type Store interface {
	Checkpoint(ctx context.Context, p *store.CheckpointParams) (*store.CheckpointResult, error)
	LeaseRelease(ctx context.Context, p *store.LeaseReleaseParams) error
	RunChildren(ctx context.Context, p *store.RunChildrenParams) ([]*store.Run, error)
}

// Codec encodes the values of workflows: inputs, outputs, step results, events.
type Codec interface {
	Marshal(v any) ([]byte, error)
	Unmarshal(data []byte, v any) error
}

// Definition is a workflow as the engine runs it: Run decodes the input, calls
// the workflow function with the run's state and encodes its output.
type Definition struct {
	Name string
	Run  func(rs *RunState, input []byte) ([]byte, error)
	// Job, when set instead of Run, makes the workflow a job (see Job).
	Job *Job
	// Retry, when set, is the workflow's retry policy: sent with the
	// checkpoint that fails a run, which the store makes a retry while the
	// policy has attempts left (store/retry.go). A run started with a policy
	// of its own keeps that one.
	Retry *store.RunRetry
}

// Config holds the engine's dependencies and limits.
type Config struct {
	Store Store
	Codec Codec
	// Clock is the one clock of the process; default the wall clock.
	Clock  clock.Clock
	Logger *slog.Logger
	// MaxPayloadBytes caps every encoded value. Required.
	MaxPayloadBytes int
	// MaxInlineBackoff: a sleep or retry backoff up to this long waits in place;
	// a longer one releases the run to wait in the store. Required.
	MaxInlineBackoff time.Duration
	// CheckpointTimeout bounds each checkpoint call (the lease duration). Required.
	CheckpointTimeout time.Duration
	// Lookup returns the definition of a workflow by name.
	Lookup func(name string) (*Definition, bool)
	// OnEnd, when set, is called after every execution of a run ends, with the
	// final state the executor committed, or nil when the run did not finish
	// here (it waits, was handed back, or its outcome could not be saved). The
	// client's results watcher takes outcomes from it without reading the store.
	OnEnd func(runID string, final *store.Run)
	// ErrorType names the recorded type of errors of the layer above (e.g. the
	// type a step error carries); nil when there are none.
	ErrorType func(err error) (string, bool)
	// StepOverride, when set, may replace the function of a step before its
	// attempts run (the test kit's step overrides and its replay): given the
	// step's name and the type of its function, it returns a function of that
	// type and true. Steps replayed from history never consult it.
	StepOverride func(name string, fnType reflect.Type) (fn any, ok bool)
	// InterceptStep, when set, wraps every step attempt (plain and
	// transactional) on the goroutine that waits for it (next runs the step
	// function on the attempt's own goroutine): it must call next once, with
	// ctx or a context derived from it, and return next's error or its own. The
	// attempt is StepInfo(ctx); run is the run, as claimed.
	InterceptStep func(ctx context.Context, run *store.Run, next func(context.Context) error) error
	// OnBlock, when set, is told of the non-determinism error that blocks a run.
	OnBlock func(run *store.Run, err error)
}

func (c Config) validate() error {
	switch {
	case c.Store == nil:
		return errors.New("engine config: Store is required")
	case c.Codec == nil:
		return errors.New("engine config: Codec is required")
	case c.Lookup == nil:
		return errors.New("engine config: Lookup is required")
	case c.MaxPayloadBytes <= 0 || c.MaxInlineBackoff <= 0 || c.CheckpointTimeout <= 0:
		return errors.New("engine config: MaxPayloadBytes, MaxInlineBackoff and CheckpointTimeout must be positive")
	}
	return nil
}

// Engine executes claimed runs. It implements the worker's Executor.
type Engine struct {
	cfg   Config
	local localRuns
}

// New returns an engine.
func New(cfg Config) (*Engine, error) {
	cfg.Clock = clock.Or(cfg.Clock)
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Engine{cfg: cfg}, nil
}

// Begin marks a run as executing in this process before its executor starts
// (a run created or woken already claimed), so that Outcome finds it.
func (e *Engine) Begin(runID string) { e.local.begin(runID) }

// Outcome returns a channel that receives the run's final state from the engine
// that saves it, if the run is executing here; nil when it did not finish here.
func (e *Engine) Outcome(runID string) (<-chan *store.Run, bool) { return e.local.wait(runID) }

// StepOverride returns the function that replaces the step name's function fn
// of type fnType (Config.StepOverride), and false when there is none.
func (rs *RunState) StepOverride(name string, fnType reflect.Type) (any, bool) {
	if rs.e.cfg.StepOverride == nil {
		return nil, false
	}
	return rs.e.cfg.StepOverride(name, fnType)
}

// Executing reports whether the run is executing in this process: its end will
// be reported to Config.OnEnd.
func (e *Engine) Executing(runID string) bool { return e.local.executing(runID) }
