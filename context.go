package trellis

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"time"

	"github.com/google/uuid"
	"github.com/trellis-dev/trellis/store"
)

// Context is what a workflow function receives. Everything a workflow does that must
// replay identically goes through it (or through Step, Async and the other op
// functions that take it): the values it returns are recorded in the run's history
// the first time and read back on replay.
//
// A Context is used only from the workflow's own goroutine.
type Context struct {
	rs       *runState
	detached bool
}

// RunID returns the ID of the run.
func (wc *Context) RunID() string { return wc.rs.run.ID }

// WorkflowID returns the workflow ID (the caller's key) of the run.
func (wc *Context) WorkflowID() string { return wc.rs.run.WorkflowID }

// Version returns the workflow version the run was started with (WorkflowOptions.Version
// at start). It never changes for the life of the run.
func (wc *Context) Version() int { return wc.rs.run.Version }

// Cancelled reports whether the run has been cancelled.
func (wc *Context) Cancelled() bool {
	select {
	case <-wc.rs.ctl.CancelRequested():
		return true
	default:
		return false
	}
}

// Detached returns a Context whose ops ignore cancellation, for cleanup steps after
// ErrCancelled. The run still ends cancelled. A deadline still applies.
func (wc *Context) Detached() *Context { return &Context{rs: wc.rs, detached: true} }

// Now returns the current time, recorded: a replay returns the same time.
func (wc *Context) Now() time.Time {
	var t time.Time
	wc.internal(store.OpNow, "", &t, func() any { return wc.rs.now().UTC() })
	return t
}

// UUID returns a random UUID (version 4) as a string, recorded.
func (wc *Context) UUID() string {
	var s string
	wc.internal(store.OpUUID, "", &s, func() any { return uuid.NewString() })
	return s
}

// Random returns a random uint64, recorded.
func (wc *Context) Random() uint64 {
	var n uint64
	wc.internal(store.OpRandom, "", &n, func() any { return rand.Uint64() })
	return n
}

// internal runs an engine op: on replay it decodes the recorded value into out,
// otherwise it records gen() and decodes that.
func (wc *Context) internal(kind store.OpKind, name string, out any, gen func() any) {
	rs := wc.rs
	rs.checkUnwind()
	pos, rec := rs.next(kind, name)
	var b []byte
	if rec != nil {
		b = rec.Result
	} else {
		b, _ = json.Marshal(gen())
		rs.recordInternal(pos, kind, name, json.RawMessage(b))
	}
	if err := json.Unmarshal(b, out); err != nil {
		rs.block(&NonDeterminismError{Position: pos, Recorded: "undecodable " + string(kind), Requested: describe(kind, name)})
	}
}

// Patched reports whether the run takes the new branch of a code change named id.
// A run that reaches the check for the first time records it and gets true; a run
// whose history was written before the check existed gets false, and keeps getting
// false on every replay. Use it to change workflow code while runs are in flight:
//
//	if wc.Patched("send-sms") { ... new code ... } else { ... old code ... }
func (wc *Context) Patched(id string) bool {
	rs := wc.rs
	rs.checkUnwind()
	rs.mu.Lock()
	pos := rs.nextPos
	rec := rs.history[pos]
	switch {
	case rec != nil && rec.Kind == store.OpPatch && rec.Name == id:
		rs.nextPos++
		rs.mu.Unlock()
		return true
	case rec != nil || pos <= rs.lastPos:
		rs.mu.Unlock()
		return false // history predates the patch: old branch, position not consumed
	}
	rs.nextPos++
	rs.mu.Unlock()
	rs.recordInternal(pos, store.OpPatch, id, true)
	return true
}

// Set stores a value in the run's store under key. The write is saved in the same
// transaction as the run's next checkpoint; later ops and clients (Client.Value) see it.
func (wc *Context) Set(key string, v any) error {
	rs := wc.rs
	rs.checkUnwind()
	b, err := rs.encode(v)
	if err != nil {
		return err // nothing recorded: the same error recurs on replay
	}
	pos, rec := rs.next(store.OpSet, key)
	if rec != nil {
		b = rec.Result
	} else {
		at := rs.now()
		rs.record(&store.Op{Position: pos, Kind: store.OpSet, Name: key, Done: true, Result: b, Attempts: 1, StartedAt: at, FinishedAt: &at},
			&store.KVWrite{Key: key, Value: b})
	}
	rs.mu.Lock()
	rs.kv[key] = b
	rs.mu.Unlock()
	return nil
}

// Delete removes key from the run's store.
func (wc *Context) Delete(key string) {
	rs := wc.rs
	rs.checkUnwind()
	pos, rec := rs.next(store.OpDelete, key)
	if rec == nil {
		at := rs.now()
		rs.record(&store.Op{Position: pos, Kind: store.OpDelete, Name: key, Done: true, Attempts: 1, StartedAt: at, FinishedAt: &at},
			&store.KVWrite{Key: key, Delete: true})
	}
	rs.mu.Lock()
	delete(rs.kv, key)
	rs.mu.Unlock()
}

// Get decodes the value stored under key into v. It reports false when the key is
// absent. It reads the run's own replayed state, so it is deterministic.
func (wc *Context) Get(key string, v any) (bool, error) {
	rs := wc.rs
	rs.mu.Lock()
	b, ok := rs.kv[key]
	rs.mu.Unlock()
	if !ok {
		return false, nil
	}
	return true, rs.codec.Unmarshal(b, v)
}

// stepContext derives the context a step attempt runs with: done when the run loses
// its lease or the worker stops, when the run is cancelled (unless detached), at the
// run's deadline, and after timeout.
func (wc *Context) stepContext(timeout time.Duration) (context.Context, context.CancelFunc) {
	rs := wc.rs
	ctx, cancel := context.WithCancel(rs.cancelCtx)
	if wc.detached {
		ctx, cancel = context.WithCancel(rs.ctx)
	}
	if d := rs.run.Deadline; d != nil {
		var c2 context.CancelFunc
		ctx, c2 = context.WithDeadlineCause(ctx, *d, ErrDeadlineExceeded)
		prev := cancel
		cancel = func() { c2(); prev() }
	}
	if timeout > 0 {
		var c3 context.CancelFunc
		ctx, c3 = context.WithTimeout(ctx, timeout)
		prev := cancel
		cancel = func() { c3(); prev() }
	}
	return ctx, cancel
}
