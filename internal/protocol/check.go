package protocol

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/trellis-dev/trellis/store"
)

// Check checks a checkpoint against the protocol's rules. rec is what the
// run's history holds under the lease (nil: the rules that need it are not
// checked). It returns nil or an *Error naming the first violation found.
func Check(p *store.CheckpointParams, rec *Recorded) error {
	if err := check(p, rec); err != nil {
		return err
	}
	return nil
}

func check(p *store.CheckpointParams, rec *Recorded) *Error {
	byPos := newPositions(len(p.Ops))
	for i, op := range p.Ops {
		if e := checkOp(i, op, false); e != nil {
			return e
		}
		// A position may be written twice in one checkpoint when the op in
		// progress was completed before the checkpoint was made (a step's last
		// attempt failed, a timer already due, an event in the inbox): the
		// later write completes the earlier, as against a recorded op.
		if j, dup := byPos.get(p.Ops[:i], op.Position); dup {
			if prev := p.Ops[j]; prev.Done || prev.Kind != op.Kind || prev.Name != op.Name {
				return opErr(i, op, "position", "written twice in one checkpoint (ops %d and %d): only an op in progress is completed by a later write", j, i)
			}
		}
		byPos.set(op.Position, i)
		if rec != nil {
			if e := checkAgainst(i, op, rec, len(p.Ops)); e != nil {
				return e
			}
		}
	}
	if e := checkAttempts(p, byPos, rec); e != nil {
		return e
	}
	if e := checkKV(p); e != nil {
		return e
	}
	if e := checkStream(p, byPos); e != nil {
		return e
	}
	if e := checkChildren(p, byPos); e != nil {
		return e
	}
	if e := checkApprovals(p, byPos); e != nil {
		return e
	}
	return checkStatus(p, rec)
}

// positions finds the op of a checkpoint at a position (the last written
// there): by a scan of the ops for the few of most checkpoints, by a map for
// more.
type positions struct{ m map[int]int }

const positionsScan = 16

func newPositions(n int) positions {
	if n <= positionsScan {
		return positions{}
	}
	return positions{m: make(map[int]int, n)}
}

func (ps positions) set(pos, i int) {
	if ps.m != nil {
		ps.m[pos] = i
	}
}

// get returns the index in ops of the last op at pos set so far (with a map),
// or of the last op at pos (scanning).
func (ps positions) get(ops []*store.Op, pos int) (int, bool) {
	if ps.m != nil {
		i, ok := ps.m[pos]
		return i, ok
	}
	for i := len(ops) - 1; i >= 0; i-- {
		if ops[i].Position == pos {
			return i, true
		}
	}
	return 0, false
}

// checkAgainst checks an op against the run's recorded history: a recorded op
// is only completed (same kind and name, recorded in progress), never
// rewritten; a new one is not far past the highest recorded position.
func checkAgainst(i int, op *store.Op, rec *Recorded, n int) *Error {
	r, ok := rec.ops[op.Position]
	switch {
	case ok && r.done && r.sum == opSum(op) && r.kind == op.Kind && r.name == op.Name:
		// The same op again: a checkpoint retried after its answer was lost
		// (through another server, or after a restart), which the store
		// answers as applied (seq) or writes as it was.
		return nil
	case ok && r.done:
		return opErr(i, op, "position", "rewrites the op recorded there (%s), which is done: a recorded op is never written again", describeRec(r))
	case ok && (r.kind != op.Kind || r.name != op.Name):
		return opErr(i, op, "position", "the op recorded there is %s: only that op, in progress, may be written there", describeRec(r))
	case !ok && op.Position > rec.high+n+MaxAhead:
		return opErr(i, op, "position", "skips ahead: the highest recorded position is %d (at most %d ops in flight)", rec.high, MaxAhead)
	case ok && op.Attempts < r.attempts:
		return opErr(i, op, "attempts", "%d: the history holds %d attempts of this step, and attempts never go back", op.Attempts, r.attempts)
	case ok && r.ended && op.Attempts == r.attempts && (!op.Done || op.Error == nil):
		return opErr(i, op, "attempts", "%d: attempt %d was lost or timed out (recorded by the server); the next attempt is %d, or the step fails with attempts %d",
			op.Attempts, r.attempts, r.attempts+1, r.attempts)
	}
	return nil
}

func describeRec(r recordedOp) string {
	if r.name == "" {
		return string(r.kind)
	}
	return fmt.Sprintf("%s %q", r.kind, r.name)
}

// checkAttempts: each failed attempt goes with its step's op in the same
// checkpoint, numbered within its attempts, with the error it failed with. A
// worker writes the outcomes "" and failed (an attempt that failed) and
// started (an at-most-once step's record that its attempt began, with the op
// in progress at that attempt: the last write of the position, so that the
// op and its row say the same); lost and timed_out are the server's.
func checkAttempts(p *store.CheckpointParams, byPos positions, rec *Recorded) *Error {
	for k, a := range p.Attempts {
		field := fmt.Sprintf("attempts[%d]", k)
		i, ok := byPos.get(p.Ops, a.Position)
		if !ok || p.Ops[i].Kind != store.OpStep {
			return fieldErr(field, "position %d: a failed attempt goes with its step's op in the same checkpoint", a.Position)
		}
		op := p.Ops[i]
		switch {
		case a.Outcome == store.AttemptLost || a.Outcome == store.AttemptTimedOut:
			return opErr(i, op, field, "outcome %q is the server's to record, not a worker's", a.Outcome)
		case !store.ValidAttemptOutcome(a.Outcome):
			return opErr(i, op, field, "unknown outcome %q", a.Outcome)
		case rec != nil && rec.ops[a.Position].ended && a.Attempt <= rec.ops[a.Position].attempts:
			return opErr(i, op, field, "attempt %d: the history's attempt %d was lost or timed out; the next is numbered after it",
				a.Attempt, rec.ops[a.Position].attempts)
		case a.Attempt < 1 || a.Attempt > op.Attempts:
			return opErr(i, op, field, "attempt %d of a step at attempt %d", a.Attempt, op.Attempts)
		case a.Error.Message == "":
			return opErr(i, op, field, "a failed attempt needs its error's message")
		case a.StartedAt.IsZero() || a.FinishedAt.Before(a.StartedAt):
			return opErr(i, op, field, "needs started_at, and finished_at not before it")
		}
		if a.Outcome == store.AttemptStarted && (op.Done || a.Attempt != op.Attempts) {
			return opErr(i, op, field, "a started attempt goes with its step in progress at that attempt (done false, attempts %d), not %s at attempt %d",
				a.Attempt, map[bool]string{true: "done", false: "in progress"}[op.Done], op.Attempts)
		}
	}
	return nil
}

// checkKV: the run-store writes are those of the checkpoint's set and delete
// ops, one each, in order, with the set op's value.
func checkKV(p *store.CheckpointParams) *Error {
	k := 0
	for i, op := range p.Ops {
		if op.Kind != store.OpSet && op.Kind != store.OpDelete {
			continue
		}
		if k >= len(p.KV) {
			return opErr(i, op, "kv", "has no run-store write (kv) of key %q in the checkpoint", op.Name)
		}
		w := p.KV[k]
		k++
		switch {
		case w.Key != op.Name:
			return opErr(i, op, "kv", "its run-store write is of key %q, not %q (writes go in the order of their ops)", w.Key, op.Name)
		case op.Kind == store.OpDelete && !w.Delete:
			return opErr(i, op, "kv", "a delete op's write deletes")
		case op.Kind == store.OpSet && (w.Delete || !bytes.Equal(w.Value, op.Result)):
			return opErr(i, op, "kv", "a set op's write sets the op's result")
		}
	}
	if k < len(p.KV) {
		return fieldErr(fmt.Sprintf("kv[%d]", k), "run-store write of key %q without its set or delete op in the checkpoint", p.KV[k].Key)
	}
	return nil
}

// checkStream: emitted events go with their emit ops, in order, under names
// that are not reserved; lifecycle events say what the checkpoint does.
func checkStream(p *store.CheckpointParams, byPos positions) *Error {
	var emits []int // indexes of emit ops, in position order
	for i, op := range p.Ops {
		if op.Kind == store.OpEmit {
			if reserved(op.Name) {
				return opErr(i, op, "name", "names starting with %s are reserved for the run's lifecycle", strings.Join(reservedPrefixes, " or "))
			}
			emits = append(emits, i)
		}
	}
	sortByPosition(p.Ops, emits)
	var steps map[string]stepFacts // made at the first step event
	next := 0
	for k, w := range p.Stream {
		field := streamField(k)
		if w.Name == "" {
			return fieldErr(field, "a stream event needs a name")
		}
		if !reserved(w.Name) {
			if next >= len(emits) {
				return fieldErr(field, "event %q has no emit op in the checkpoint (a workflow's event is recorded as an op of kind emit)", w.Name)
			}
			op := p.Ops[emits[next]]
			if op.Name != w.Name {
				return opErr(emits[next], op, field, "the emit op's event is %q, not %q (events go in the order of their ops)", op.Name, w.Name)
			}
			next++
			continue
		}
		if steps == nil && (w.Name == store.StreamStepCompleted || w.Name == store.StreamStepFailed) {
			steps = stepsOf(p)
		}
		if e := checkLifecycle(p, steps, k, w); e != nil {
			return e
		}
	}
	if next < len(emits) {
		op := p.Ops[emits[next]]
		return opErr(emits[next], op, "stream", "an emit op needs its event in the checkpoint's stream")
	}
	return nil
}

func reserved(name string) bool {
	for _, p := range reservedPrefixes {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

func sortByPosition(ops []*store.Op, idx []int) {
	slices.SortStableFunc(idx, func(a, b int) int { return ops[a].Position - ops[b].Position })
}

// lifecycleStatus is the status a checkpoint must have to carry an event.
var lifecycleStatus = map[string]store.Status{
	store.StreamRunWaiting:   store.StatusWaiting,
	store.StreamRunBlocked:   store.StatusBlocked,
	store.StreamRunSucceeded: store.StatusSucceeded,
	store.StreamRunFailed:    store.StatusFailed,
	store.StreamRunCancelled: store.StatusCancelled,
}

// stepFacts are what a checkpoint records of the steps of a name, for their
// lifecycle events.
type stepFacts struct{ completed, failed bool }

// stepsOf gathers the facts of every step name of p, in one pass over its
// ops and attempts (so that checking many events costs no more than that).
func stepsOf(p *store.CheckpointParams) map[string]stepFacts {
	attempted := make(map[int]bool, len(p.Attempts))
	for _, a := range p.Attempts {
		attempted[a.Position] = true
	}
	m := make(map[string]stepFacts)
	for _, op := range p.Ops {
		if op.Kind != store.OpStep {
			continue
		}
		f := m[op.Name]
		f.completed = f.completed || op.Done && op.Error == nil
		f.failed = f.failed || op.Error != nil || attempted[op.Position]
		m[op.Name] = f
	}
	return m
}

func checkLifecycle(p *store.CheckpointParams, steps map[string]stepFacts, k int, w store.StreamWrite) *Error {
	field := streamField(k)
	step := w.Name == store.StreamStepCompleted || w.Name == store.StreamStepFailed
	// (A step event's data is decoded below, which checks it is JSON.)
	if d := bytes.TrimLeft(w.Data, " \t\r\n"); len(d) == 0 || d[0] != '{' || !step && !json.Valid(d) {
		return fieldErr(field, "lifecycle event %q: its data is a JSON object", w.Name)
	}
	switch w.Name {
	case store.StreamRunStarted, store.StreamRunResumed:
		if k != 0 {
			return fieldErr(field, "%s is the first event of an execution's first checkpoint", w.Name)
		}
		return nil
	case store.StreamStepCompleted, store.StreamStepFailed:
		if !jsontext.Value(w.Data).IsValid() {
			return fieldErr(field, "lifecycle event %q: its data is a JSON object", w.Name)
		}
		name := stepName(w.Data)
		if name == "" {
			return fieldErr(field, "%s: its data names the step (name)", w.Name)
		}
		f := steps[name]
		if w.Name == store.StreamStepCompleted && f.completed || w.Name == store.StreamStepFailed && f.failed {
			return nil
		}
		what := "a completed step op"
		if w.Name == store.StreamStepFailed {
			what = "a step op with a failed attempt or an error"
		}
		return fieldErr(field, "%s of step %q without %s of that name in the checkpoint", w.Name, name, what)
	}
	want, ok := lifecycleStatus[w.Name]
	if !ok {
		return fieldErr(field, "%q is not a lifecycle event (names starting with %s are reserved)", w.Name, strings.Join(reservedPrefixes, " or "))
	}
	if p.Status != want {
		return fieldErr(field, "%s goes with status %s, not %q", w.Name, want, p.Status)
	}
	if k != len(p.Stream)-1 {
		return fieldErr(field, "%s is the checkpoint's last event", w.Name)
	}
	return nil
}

// streamField names stream event k; a few are named without formatting.
func streamField(k int) string {
	if k < len(streamFields) {
		return streamFields[k]
	}
	return fmt.Sprintf("stream[%d]", k)
}

var streamFields = func() (f [8]string) {
	for k := range f {
		f[k] = fmt.Sprintf("stream[%d]", k)
	}
	return f
}()

// checkChildren: a group of child runs goes with its child op in the
// checkpoint, runs of the op's workflow, with the run IDs derived from the
// parent's (RUN.POSITION, or RUN.POSITION.INDEX for a map's items).
func checkChildren(p *store.CheckpointParams, byPos positions) *Error {
	for g, grp := range p.Children {
		field := fmt.Sprintf("children[%d]", g)
		if grp == nil || len(grp.Runs) == 0 {
			return fieldErr(field, "a child group has runs")
		}
		i, ok := byPos.get(p.Ops, grp.Position)
		if !ok || p.Ops[i].Kind != store.OpChild {
			return fieldErr(field, "position %d: a child group goes with its child op in the same checkpoint", grp.Position)
		}
		op := p.Ops[i]
		if grp.MaxConcurrency < 0 {
			return opErr(i, op, field, "max_concurrency is at least 0")
		}
		base := p.Lease.RunID + "." + strconv.Itoa(grp.Position)
		for k, r := range grp.Runs {
			switch {
			case r == nil:
				return opErr(i, op, field, "run %d is missing", k)
			case r.Workflow != op.Name:
				return opErr(i, op, field, "run %d is of workflow %q, not the op's %q", k, r.Workflow, op.Name)
			case r.ID != base+"."+strconv.Itoa(k) && !(len(grp.Runs) == 1 && r.ID == base):
				return opErr(i, op, field, "run %d has ID %q: a child's run ID is %s (one child) or %s.%d (item %d of a map)", k, r.ID, base, base, k, k)
			}
		}
	}
	return nil
}

// checkApprovals: a request goes with its approval op, in progress, in the
// checkpoint. The op may be completed by a later write in the same
// checkpoint (an approval whose timeout passed before the checkpoint was
// made: requested and timed out at once), as the first write's request.
func checkApprovals(p *store.CheckpointParams, byPos positions) *Error {
	for k, a := range p.Approvals {
		field := fmt.Sprintf("approvals[%d]", k)
		if a == nil || a.ID == "" {
			return fieldErr(field, "an approval request needs an ID")
		}
		i, ok := byPos.get(p.Ops, a.Position)
		if ok && p.Ops[i].Done {
			i, ok = earlierAt(p.Ops, i)
		}
		if !ok || p.Ops[i].Kind != store.OpApproval || p.Ops[i].Done {
			return fieldErr(field, "position %d: an approval request goes with its approval op, in progress, in the same checkpoint", a.Position)
		}
		if op := p.Ops[i]; a.Name != op.Name {
			return opErr(i, op, field, "request %q names %q, not the op's %q", a.ID, a.Name, op.Name)
		}
		if want := p.Lease.RunID + ".approval." + strconv.Itoa(a.Position); a.ID != want {
			return opErr(i, p.Ops[i], field, "request ID %q: an approval request's ID is %s (RUN.approval.POSITION)", a.ID, want)
		}
	}
	return nil
}

// earlierAt returns the index of the write before ops[i] at its position in
// the same checkpoint (check allows one: the op in progress it completes).
func earlierAt(ops []*store.Op, i int) (int, bool) {
	for j := i - 1; j >= 0; j-- {
		if ops[j].Position == ops[i].Position {
			return j, true
		}
	}
	return 0, false
}

// checkStatus: the status a checkpoint leaves the run in, with the fields it
// needs and none it cannot have.
func checkStatus(p *store.CheckpointParams, rec *Recorded) *Error {
	st := p.Status
	bad := func(format string, args ...any) *Error {
		return fieldErr("status", "%s: "+format, append([]any{st}, args...)...)
	}
	waitFields := p.WakeAt != nil || len(p.WaitEvents) > 0 || p.WaitReason != ""
	switch st {
	case store.StatusRunning, store.StatusPending:
		switch {
		case len(p.Output) > 0 || p.Error != nil:
			return bad("no output or error (the run has not ended)")
		case waitFields:
			return bad("no wait (wake_at, wait_events, wait_reason) but with status waiting")
		}
	case store.StatusWaiting:
		switch {
		case p.WakeAt == nil && len(p.WaitEvents) == 0:
			return bad("needs wake_at or wait_events (what ends the wait)")
		case len(p.Output) > 0 || p.Error != nil:
			return bad("no output or error (the run has not ended)")
		}
	case store.StatusBlocked:
		switch {
		case p.Error == nil || p.Error.Message == "":
			return bad("needs the error that blocks the run")
		case len(p.Output) > 0 || p.WakeAt != nil || len(p.WaitEvents) > 0:
			return bad("no output and no wait")
		}
	case store.StatusSucceeded:
		if p.Error != nil || waitFields {
			return bad("no error and no wait")
		}
	case store.StatusFailed, store.StatusCancelled:
		switch {
		case st == store.StatusFailed && (p.Error == nil || p.Error.Message == ""):
			return bad("needs the run's error")
		case len(p.Output) > 0 || waitFields:
			return bad("no output and no wait")
		case st == store.StatusCancelled && rec != nil && !rec.CancelRequested:
			return bad("the run's cancellation was not requested")
		}
	default:
		return fieldErr("status", "%q is not a status a worker writes (running, pending, waiting, blocked, succeeded, failed, cancelled)", st)
	}
	if p.Retry != nil {
		// The workflow's retry policy, applied by the store (workflow retries).
		if st != store.StatusFailed {
			return fieldErr("retry", "goes only with status failed (the workflow's retry policy, for a run it fails)")
		}
		if err := p.Retry.Validate(); err != nil {
			return fieldErr("retry", "%s", strings.TrimPrefix(err.Error(), store.ErrInvalidParams.Error()+": "))
		}
	}
	for k, name := range p.WaitEvents {
		if name == "" {
			return fieldErr(fmt.Sprintf("wait_events[%d]", k), "an event name is not empty")
		}
	}
	for k, name := range p.NoEvents {
		if name == "" {
			return fieldErr(fmt.Sprintf("no_events[%d]", k), "an event name is not empty")
		}
	}
	for k, seq := range p.Consume {
		if seq <= 0 {
			return fieldErr(fmt.Sprintf("consume[%d]", k), "an inbox event's sequence is at least 1")
		}
	}
	return nil
}

// CheckHistory checks a run's history as readers get it (the export format's
// ops, the golden histories of trellistest): every op valid by its kind, in
// increasing positions.
func CheckHistory(ops []*store.Op) error {
	last := -1
	for i, op := range ops {
		if e := checkOp(i, op, true); e != nil {
			return e
		}
		if op.Position <= last {
			return opErr(i, op, "position", "positions increase (the op before is at %d)", last)
		}
		last = op.Position
		for k, a := range op.AttemptLog {
			if a.Attempt < 1 || a.Attempt > op.Attempts || a.Error.Message == "" {
				return opErr(i, op, fmt.Sprintf("attempt_log[%d]", k), "a failed attempt from 1 to the op's attempts, with its error")
			}
		}
	}
	return nil
}
