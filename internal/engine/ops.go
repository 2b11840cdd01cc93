package engine

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"time"

	"github.com/google/uuid"
	"github.com/trellis-dev/trellis/internal/clock"
	"github.com/trellis-dev/trellis/store"
)

// Now returns the current time, recorded: a replay returns the same time.
func (rs *RunState) Now() time.Time {
	var t time.Time
	rs.internal(store.OpNow, "", &t, func() any { return rs.now().UTC() })
	return t
}

// UUID returns a random UUID (version 4), recorded.
func (rs *RunState) UUID() string {
	var s string
	rs.internal(store.OpUUID, "", &s, func() any { return uuid.NewString() })
	return s
}

// Random returns a random uint64, recorded.
func (rs *RunState) Random() uint64 {
	var n uint64
	rs.internal(store.OpRandom, "", &n, func() any { return rand.Uint64() })
	return n
}

// internal runs an engine op: on replay it decodes the recorded value into out,
// otherwise it records gen() and decodes that.
func (rs *RunState) internal(kind store.OpKind, name string, out any, gen func() any) {
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

// Patched reports whether the run takes the new branch of the code change id: true
// when it reaches the check for the first time (recorded), false when its history
// was written before the check existed.
func (rs *RunState) Patched(id string) bool {
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

// Set stores a value in the run's store under key, saved with the next checkpoint.
func (rs *RunState) Set(key string, v any) error {
	rs.checkUnwind()
	b, err := rs.Encode(v)
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
func (rs *RunState) Delete(key string) {
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

// Get decodes the value stored under key into v; false when the key is absent.
// It reads the run's own replayed state, so it is deterministic.
func (rs *RunState) Get(key string, v any) (bool, error) {
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
// run's deadline (cause ErrDeadlineExceeded), after timeout (cause
// errAttemptTimeout) and at totalAt unless zero (cause errTotalTimeout), all by
// the engine's clock. Call release on the returned stopper when the attempt ends.
func (rs *RunState) stepContext(detached bool, timeout time.Duration, totalAt time.Time) (context.Context, stepStopper) {
	parent := rs.cancelCtx
	if detached {
		parent = rs.ctx
	}
	ctx, cancel := context.WithCancelCause(parent)
	st := stepStopper{cancel: cancel}
	clk := rs.e.cfg.Clock
	if d := rs.run.Deadline; d != nil {
		st.timers[0] = clk.AfterFunc(d.Sub(rs.now()), func() { cancel(ErrDeadlineExceeded) })
	}
	if timeout > 0 {
		st.timers[1] = clk.AfterFunc(timeout, func() { cancel(errAttemptTimeout) })
	}
	if !totalAt.IsZero() {
		st.timers[2] = clk.AfterFunc(totalAt.Sub(rs.now()), func() { cancel(errTotalTimeout) })
	}
	return ctx, st
}

// stepStopper ends a step attempt's context and its timers (a value, so that an
// attempt without timers allocates nothing for it).
type stepStopper struct {
	cancel context.CancelCauseFunc
	timers [3]clock.Timer
}

func (s stepStopper) release() {
	for _, t := range s.timers {
		if t != nil {
			t.Stop()
		}
	}
	s.cancel(nil)
}
