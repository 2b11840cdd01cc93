// Package protocol checks what a worker writes against the worker protocol's
// rules (docs/worker-protocol.md, "Ops" and "Checkpoints"): the shape of each
// op by its kind, the run-store writes, stream events, child groups and
// approval requests that must go with ops, the status a checkpoint may leave a
// run in, and, given what the run recorded so far (Recorded), that no recorded
// op is rewritten and no position runs far ahead.
//
// The server runs every checkpoint a remote worker sends through Check before
// the store sees it; a violation is refused with invalid_argument (the
// store's ErrInvalidParams) naming the op, and nothing of the checkpoint is
// written. The Go engine is one implementation of these rules: its checkpoints
// pass them (every remote-worker test runs through the check), and so do the
// golden histories of trellistest (CheckHistory).
package protocol

import (
	"bytes"
	"encoding/json"
	"fmt"
	"hash/maphash"
	"math"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/trellis-dev/trellis/store"
)

// MaxAhead is how far past the highest recorded position (plus the
// checkpoint's own ops) a new op may be: positions are taken in order, but an
// op may be recorded after later ones while it is in flight (an async step),
// so a checkpoint may leave gaps that a later one fills.
const MaxAhead = 1 << 16

// Reserved prefixes of stream event names: the run's lifecycle.
var reservedPrefixes = []string{"run.", "step."}

// Recorded is what a run's history holds under the current lease, as far as
// the rules need it. The zero value is not usable: make it with NewRecorded.
type Recorded struct {
	ops  map[int]recordedOp
	high int // the highest recorded position; -1 when none
	// CancelRequested is whether the run's cancellation was requested (a
	// checkpoint may end it cancelled only then).
	CancelRequested bool
}

type recordedOp struct {
	kind store.OpKind
	name string
	done bool
	sum  uint64 // opSum: what the op holds, to tell a retry's identical write
	// attempts is a step's recorded attempts; ended is set when the last of
	// them ended without its worker (lost or timed out, written by the store):
	// the next attempt is numbered after it.
	attempts int
	ended    bool
}

// NewRecorded returns the record of a run's history ops.
func NewRecorded(history []*store.Op, cancelRequested bool) *Recorded {
	r := &Recorded{ops: make(map[int]recordedOp, len(history)), high: -1, CancelRequested: cancelRequested}
	for _, op := range history {
		r.add(op)
	}
	return r
}

func (r *Recorded) add(op *store.Op) {
	ro := recordedOp{kind: op.Kind, name: op.Name, done: op.Done, sum: opSum(op), attempts: op.Attempts}
	if n := len(op.AttemptLog); n > 0 {
		a := op.AttemptLog[n-1]
		ro.ended = a.Attempt == op.Attempts && (a.Outcome == store.AttemptLost || a.Outcome == store.AttemptTimedOut)
	}
	r.ops[op.Position] = ro
	r.high = max(r.high, op.Position)
}

// Apply adds the ops of a checkpoint that was written.
func (r *Recorded) Apply(p *store.CheckpointParams) {
	for _, op := range p.Ops {
		r.add(op)
	}
}

// seed keys opSum within this process (sums are compared here, never kept).
var seed = maphash.MakeSeed()

// opSum sums what an op holds that a rewrite could change: kind, name, done,
// result, error and attempts (not its times).
func opSum(op *store.Op) uint64 {
	var h maphash.Hash
	h.SetSeed(seed)
	h.WriteString(string(op.Kind))
	h.WriteByte(0)
	h.WriteString(op.Name)
	h.WriteByte(0)
	if op.Done {
		h.WriteByte(1)
	}
	h.WriteByte(0)
	h.Write(op.Result)
	h.WriteByte(0)
	if e := op.Error; e != nil {
		h.WriteString(e.Message)
		h.WriteByte(0)
		h.WriteString(e.Type)
		if e.NonRetryable {
			h.WriteByte(1)
		}
	}
	h.WriteByte(0)
	h.WriteString(strconv.Itoa(op.Attempts))
	return h.Sum64()
}

// Error is a violation of the protocol by a checkpoint: it names the op (or
// the field) that breaks a rule. It wraps store.ErrInvalidParams.
type Error struct {
	// Op is the index of the op in the checkpoint's ops, -1 when the violation
	// is not an op's.
	Op int
	// Position, Kind and Name are the op's.
	Position int
	Kind     store.OpKind
	Name     string
	// Field names what breaks the rule when it is not an op ("status",
	// "stream[2]", "kv[0]", ...).
	Field string
	Msg   string
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(store.ErrInvalidParams.Error())
	b.WriteString(": ")
	if e.Op >= 0 {
		fmt.Fprintf(&b, "op %d (position %d, %s", e.Op, e.Position, describe(e.Kind))
		if e.Name != "" {
			fmt.Fprintf(&b, " %q", e.Name)
		}
		b.WriteString(")")
		if e.Field != "" {
			b.WriteString(" ")
			b.WriteString(e.Field)
		}
	} else {
		b.WriteString(e.Field)
	}
	b.WriteString(": ")
	b.WriteString(e.Msg)
	return b.String()
}

func describe(k store.OpKind) string {
	if k == "" {
		return "no kind"
	}
	return string(k)
}

// Unwrap makes the error a store.ErrInvalidParams.
func (e *Error) Unwrap() error { return store.ErrInvalidParams }

func opErr(i int, op *store.Op, field, format string, args ...any) *Error {
	return &Error{Op: i, Position: op.Position, Kind: op.Kind, Name: op.Name, Field: field, Msg: fmt.Sprintf(format, args...)}
}

func fieldErr(field, format string, args ...any) *Error {
	return &Error{Op: -1, Field: field, Msg: fmt.Sprintf(format, args...)}
}

// kindRule is what an op of a kind must look like.
type kindRule struct {
	named    bool // a name is required; otherwise it must be empty
	alwaysOn bool // written done only
	canFail  bool // may carry an error (done only)
	// result checks a done op's result (nil: any, including none).
	result func(b []byte) string
}

var kinds = map[store.OpKind]kindRule{
	store.OpStep:     {named: true, canFail: true},
	store.OpNow:      {alwaysOn: true, result: isTime},
	store.OpUUID:     {alwaysOn: true, result: isUUID},
	store.OpRandom:   {alwaysOn: true, result: isUint64},
	store.OpPatch:    {named: true, alwaysOn: true, result: isTrue},
	store.OpSet:      {named: true, alwaysOn: true, result: isPresent},
	store.OpDelete:   {named: true, alwaysOn: true, result: isAbsent},
	store.OpTimer:    {result: isTime},
	store.OpEvent:    {named: true, canFail: true},
	store.OpApproval: {named: true, canFail: true},
	store.OpChild:    {named: true, canFail: true},
	store.OpSelect:   {alwaysOn: true, result: isIndex},
	store.OpEmit:     {named: true, alwaysOn: true, result: isAbsent},
}

// Kinds returns the op kinds the protocol knows.
func Kinds() []store.OpKind {
	return []store.OpKind{store.OpStep, store.OpNow, store.OpUUID, store.OpRandom, store.OpPatch, store.OpSet,
		store.OpDelete, store.OpTimer, store.OpEvent, store.OpApproval, store.OpChild, store.OpSelect, store.OpEmit}
}

// checkOp checks one op on its own: its kind, name, attempts and result. With
// read, the op is as a reader gets it (history), which may hold attempt_log.
func checkOp(i int, op *store.Op, read bool) *Error {
	if op == nil {
		return &Error{Op: i, Msg: "no op"}
	}
	rule, ok := kinds[op.Kind]
	switch {
	case !ok:
		return opErr(i, op, "kind", "unknown op kind %q (known: %s)", op.Kind, kindList())
	case op.Position < 0 || op.Position > math.MaxInt32:
		return opErr(i, op, "position", "must be from 0 to %d", math.MaxInt32)
	case rule.named && op.Name == "":
		return opErr(i, op, "name", "a %s op needs a name", op.Kind)
	case !rule.named && op.Name != "":
		return opErr(i, op, "name", "a %s op has no name", op.Kind)
	case op.Attempts < 0:
		return opErr(i, op, "attempts", "must be at least 0, not %d", op.Attempts)
	case op.Kind == store.OpStep && op.Attempts == 0 && op.Done && op.Error == nil:
		// 0: a step not attempted yet (in progress), or one that never ran (the
		// run was cancelled or past its deadline when it was asked for).
		return opErr(i, op, "attempts", "a step done without an attempt has the error that kept it from running")
	case op.Kind != store.OpStep && op.Attempts != 1:
		return opErr(i, op, "attempts", "a %s op has 1 attempt, not %d", op.Kind, op.Attempts)
	case rule.alwaysOn && !op.Done:
		return opErr(i, op, "done", "a %s op is written done", op.Kind)
	case op.Error != nil && !rule.canFail:
		return opErr(i, op, "error", "a %s op has no error", op.Kind)
	case op.Error != nil && !op.Done:
		return opErr(i, op, "error", "an op in progress has no error (its failed attempts are in attempts)")
	case op.Error != nil && op.Error.Message == "":
		return opErr(i, op, "error", "an error needs a message")
	case op.StartedAt.IsZero():
		return opErr(i, op, "started_at", "required")
	case op.FinishedAt != nil && !op.Done:
		return opErr(i, op, "finished_at", "an op in progress has not finished")
	case op.AttemptStartedAt != nil && (op.Kind != store.OpStep || !op.Done || op.Error != nil || op.Attempts < 1):
		// An at-most-once step's succeeded attempt row replaces the row that
		// recorded its start, from its first attempt on.
		return opErr(i, op, "attempt_started_at", "only for a step that an attempt completed (after failed attempts, or at most once)")
	case op.AttemptStartedAt != nil && op.FinishedAt != nil && op.AttemptStartedAt.After(*op.FinishedAt):
		return opErr(i, op, "attempt_started_at", "after the step finished")
	case len(op.AttemptLog) > 0 && !read:
		return opErr(i, op, "attempt_log", "read only: send failed attempts in the checkpoint's attempts")
	}
	switch {
	case op.Kind == store.OpStep && !op.Done && len(op.Result) > 0:
		return opErr(i, op, "result", "a step in progress has no result")
	case op.Kind == store.OpStep && op.Error != nil && len(op.Result) > 0,
		op.Kind == store.OpEvent && op.Error != nil && len(op.Result) > 0,
		op.Kind == store.OpApproval && op.Error != nil && len(op.Result) > 0:
		return opErr(i, op, "result", "a %s op that failed has no result", op.Kind)
	case op.Kind == store.OpTimer:
		// A timer's due time is written with the timer in progress too.
		if msg := isTime(op.Result); msg != "" {
			return opErr(i, op, "result", "%s", msg)
		}
	case !op.Done && op.Kind != store.OpStep:
		// A wait in progress (event, approval, child) holds its state.
		if msg := isObject(op.Result); msg != "" {
			return opErr(i, op, "result", "%s", msg)
		}
	case rule.result != nil && op.Done:
		if msg := rule.result(op.Result); msg != "" {
			return opErr(i, op, "result", "%s", msg)
		}
	}
	return nil
}

func kindList() string {
	var s []string
	for _, k := range Kinds() {
		s = append(s, string(k))
	}
	return strings.Join(s, ", ")
}

// The result checks return "" for a result they accept, else why not.

func isPresent(b []byte) string {
	if len(b) == 0 {
		return "needs a result (the value)"
	}
	return ""
}

func isAbsent(b []byte) string {
	if len(b) > 0 {
		return "has no result"
	}
	return ""
}

func isTrue(b []byte) string {
	if !bytes.Equal(bytes.TrimSpace(b), []byte("true")) {
		return "must be true"
	}
	return ""
}

func isTime(b []byte) string {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return "must be a JSON string holding an RFC 3339 time"
	}
	if _, err := time.Parse(time.RFC3339Nano, s); err != nil {
		return fmt.Sprintf("must be an RFC 3339 time, not %q", s)
	}
	return ""
}

func isUUID(b []byte) string {
	var s string
	if err := json.Unmarshal(b, &s); err != nil || len(s) != 36 {
		return "must be a JSON string holding a UUID (36 characters)"
	}
	for i, c := range s {
		dash := i == 8 || i == 13 || i == 18 || i == 23
		if dash != (c == '-') || !dash && !strings.ContainsRune("0123456789abcdefABCDEF", c) {
			return fmt.Sprintf("must be a UUID, not %q", s)
		}
	}
	return ""
}

func isUint64(b []byte) string {
	if _, err := strconv.ParseUint(string(bytes.TrimSpace(b)), 10, 64); err != nil {
		return "must be a JSON integer from 0 to 2^64-1"
	}
	return ""
}

func isIndex(b []byte) string {
	if n, err := strconv.ParseUint(string(bytes.TrimSpace(b)), 10, 31); err != nil || n > math.MaxInt32 {
		return "must be the index of the winning case, a JSON integer ≥ 0"
	}
	return ""
}

func isObject(b []byte) string {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil || m == nil {
		return "a wait in progress holds its state, a JSON object"
	}
	return ""
}

// unchecked turns the server's checks off (SkipChecksForTests).
var unchecked atomic.Bool

// SkipChecksForTests makes Checked report false until the returned function
// is called: the servers of the process then apply checkpoints unchecked. It
// is for the tests of the storage contract through a server
// (store/storeremote runs store/storetest's suite over the worker protocol),
// whose checkpoints exercise the store with writes no worker makes (bare ops,
// waits without a wake, run-store writes without their ops); nothing else
// calls it. The protocol's own tests hold the server to the rules.
func SkipChecksForTests() (restore func()) {
	unchecked.Store(true)
	return func() { unchecked.Store(false) }
}

// Checked reports whether servers check checkpoints (always, but in the
// tests that SkipChecksForTests).
func Checked() bool { return !unchecked.Load() }
