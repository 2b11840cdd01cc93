package conformance

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/google/uuid"
)

// History is a run's history as the server answers it
// (GET /v1/namespaces/{ns}/runs/{id}/history, docs/history-format.md): the
// fields the kit checks.
type History struct {
	Format string `json:"format"`
	Run    Run    `json:"run"`
	Ops    []Op   `json:"ops"`
}

// Run is a run record as the HTTP API answers it.
type Run struct {
	ID         string          `json:"id"`
	WorkflowID string          `json:"workflow_id"`
	Workflow   string          `json:"workflow"`
	Queue      string          `json:"queue"`
	Status     string          `json:"status"`
	Input      json.RawMessage `json:"input"`
	Output     json.RawMessage `json:"output"`
	Error      *ErrorInfo      `json:"error"`
	WaitReason string          `json:"wait_reason"`
	Attempts   int             `json:"attempts"`
	ParentID   string          `json:"parent_id"`
	CreatedAt  time.Time       `json:"created_at"`
	StartedAt  *time.Time      `json:"started_at"`
	FinishedAt *time.Time      `json:"finished_at"`
}

// Final reports whether the run has ended.
func (r *Run) Final() bool {
	return r.Status == "succeeded" || r.Status == "failed" || r.Status == "cancelled"
}

// ErrorInfo is a recorded error.
type ErrorInfo struct {
	Message string `json:"message"`
	Type    string `json:"type"`
}

// Op is an op of a history.
type Op struct {
	Position         int             `json:"position"`
	Kind             string          `json:"kind"`
	Name             string          `json:"name"`
	Done             bool            `json:"done"`
	Result           json.RawMessage `json:"result"`
	Error            *ErrorInfo      `json:"error"`
	Attempts         int             `json:"attempts"`
	AttemptLog       []Attempt       `json:"attempt_log"`
	StartedAt        *time.Time      `json:"started_at"`
	FinishedAt       *time.Time      `json:"finished_at"`
	AttemptStartedAt *time.Time      `json:"attempt_started_at"`
}

// Attempt is a failed attempt of a step.
type Attempt struct {
	Attempt    int        `json:"attempt"`
	Error      *ErrorInfo `json:"error"`
	StartedAt  time.Time  `json:"started_at"`
	FinishedAt time.Time  `json:"finished_at"`
	Outcome    string     `json:"outcome"`
}

// StreamEvent is an event of a run's stream.
type StreamEvent struct {
	Seq   int64
	Event string
	Data  json.RawMessage
}

// Source reads what some checks need beyond the history, from the server.
type Source interface {
	// Children returns the child runs the op at position of the run started.
	Children(ctx context.Context, runID string, position int) ([]Run, error)
	// Value returns the run-store value of key, and false when there is none.
	Value(ctx context.Context, runID, key string) (json.RawMessage, bool, error)
	// Stream returns the run's stream, every event to its final one.
	Stream(ctx context.Context, runID string) ([]StreamEvent, error)
}

// Facts are what the runner saw happen to a run.
type Facts struct {
	// KilledAt is when the worker was SIGKILLed (kill_worker).
	KilledAt time.Time
}

// Verify checks a run that the runner considers ended against the case: its
// status, output and error, its history's skeleton, and the case's checks.
// It returns the first difference found.
func (c *Case) Verify(ctx context.Context, h *History, src Source, f Facts) error {
	if err := c.verifyEnd(&h.Run); err != nil {
		return err
	}
	if err := MatchHistory(c.History, h.Ops); err != nil {
		return fmt.Errorf("history: %w", err)
	}
	for _, ch := range c.Checks {
		if err := ch.run(ctx, h, c, src, f); err != nil {
			return fmt.Errorf("%s: %w", ch.Check, err)
		}
	}
	return nil
}

func (c *Case) verifyEnd(r *Run) error {
	e := c.Expect
	if r.Status != e.Status {
		msg := fmt.Sprintf("status %s, want %s", r.Status, e.Status)
		if r.Error != nil {
			msg += fmt.Sprintf(" (error %s: %s)", orNone(r.Error.Type), r.Error.Message)
		}
		return errors.New(msg)
	}
	if e.Output != nil && !JSONEqual(r.Output, e.Output) {
		return fmt.Errorf("output %s, want %s", compact(r.Output), compact(e.Output))
	}
	if e.ErrorType != "" || e.ErrorContains != "" {
		if r.Error == nil {
			return fmt.Errorf("no error, want one of type %s", e.ErrorType)
		}
		if e.ErrorType != "" && r.Error.Type != e.ErrorType {
			return fmt.Errorf("error type %s, want %s (message %q)", orNone(r.Error.Type), e.ErrorType, r.Error.Message)
		}
		if !strings.Contains(r.Error.Message, e.ErrorContains) {
			return fmt.Errorf("error message %q does not contain %q", r.Error.Message, e.ErrorContains)
		}
	}
	if e.MinDurationMS > 0 {
		if r.FinishedAt == nil {
			return errors.New("no finished_at")
		}
		if d := r.FinishedAt.Sub(r.CreatedAt); d < time.Duration(e.MinDurationMS)*time.Millisecond {
			return fmt.Errorf("the run lasted %s, want at least %dms", d.Round(time.Millisecond), e.MinDurationMS)
		}
	}
	return nil
}

// MatchHistory checks ops against the skeleton: each pattern matches the next
// op, in order, but an optional pattern may match none; no op may be left.
// Positions must rise.
func MatchHistory(skel []OpPattern, ops []Op) error {
	for i := 1; i < len(ops); i++ {
		if ops[i].Position <= ops[i-1].Position {
			return fmt.Errorf("positions not rising: %d after %d", ops[i].Position, ops[i-1].Position)
		}
	}
	var firstErr error
	var match func(p, o int) bool
	match = func(p, o int) bool {
		if p == len(skel) {
			if o < len(ops) {
				if firstErr == nil {
					firstErr = fmt.Errorf("unexpected op at position %d: %s", ops[o].Position, describe(ops[o]))
				}
				return false
			}
			return true
		}
		if skel[p].Optional && match(p+1, o) {
			return true
		}
		if o == len(ops) {
			if firstErr == nil && !skel[p].Optional {
				firstErr = fmt.Errorf("missing op %d of %d: want %s; the history has %d ops", p+1, len(skel), skel[p].describe(), len(ops))
			}
			return false
		}
		if err := skel[p].match(ops[o]); err != nil {
			if firstErr == nil {
				firstErr = fmt.Errorf("op at position %d (%s): %w", ops[o].Position, describe(ops[o]), err)
			}
			return false
		}
		return match(p+1, o+1)
	}
	if match(0, 0) {
		return nil
	}
	return firstErr
}

func (p OpPattern) match(op Op) error {
	switch {
	case p.Position != nil && op.Position != *p.Position:
		return fmt.Errorf("position %d, want %d", op.Position, *p.Position)
	case op.Kind != p.Kind:
		return fmt.Errorf("want %s", p.describe())
	case p.Name != "" && op.Name != p.Name:
		return fmt.Errorf("want %s", p.describe())
	case p.Done != nil && op.Done != *p.Done:
		return fmt.Errorf("done %t, want %t", op.Done, *p.Done)
	case p.Attempts != nil && op.Attempts != *p.Attempts:
		return fmt.Errorf("attempts %d, want %d", op.Attempts, *p.Attempts)
	case p.Result != nil && !JSONEqual(op.Result, p.Result):
		return fmt.Errorf("result %s, want %s", compact(op.Result), compact(p.Result))
	case p.ResultHas != nil && !JSONHas(op.Result, p.ResultHas):
		return fmt.Errorf("result %s, want one with %s", compact(op.Result), compact(p.ResultHas))
	}
	if p.ErrorType != "" {
		if op.Error == nil {
			return fmt.Errorf("no error, want one of type %s", p.ErrorType)
		}
		if op.Error.Type != p.ErrorType {
			return fmt.Errorf("error type %s, want %s (message %q)", orNone(op.Error.Type), p.ErrorType, op.Error.Message)
		}
	} else if p.Done != nil && *p.Done && op.Error != nil && p.Result != nil {
		return fmt.Errorf("error %q, want result %s", op.Error.Message, compact(p.Result))
	}
	if p.AttemptErrors != nil {
		var got []string
		for _, a := range op.AttemptLog {
			msg := ""
			if a.Error != nil {
				msg = a.Error.Message
			}
			got = append(got, msg)
		}
		if !slices.Equal(got, p.AttemptErrors) {
			return fmt.Errorf("attempt_log messages %q, want %q", got, p.AttemptErrors)
		}
	}
	return nil
}

func (p OpPattern) describe() string {
	if p.Name == "" {
		return p.Kind
	}
	return fmt.Sprintf("%s %q", p.Kind, p.Name)
}

func describe(op Op) string {
	s := op.Kind
	if op.Name != "" {
		s += fmt.Sprintf(" %q", op.Name)
	}
	if !op.Done {
		s += " (in progress)"
	}
	return s
}

func (ch *Check) run(ctx context.Context, h *History, c *Case, src Source, f Facts) error {
	switch ch.Check {
	case CheckBackoff:
		return checkBackoff(h, ch.Step, ch.MinGapsMS)
	case CheckTimerDue:
		return checkTimerDue(h, ch.MinAfterCreatedMS)
	case CheckChildren:
		kids, err := src.Children(ctx, h.Run.ID, *ch.Position)
		if err != nil {
			return err
		}
		return checkChildren(h.Run.ID, kids, ch.Workflow, ch.Outputs, ch.MaxRunning)
	case CheckValue:
		v, ok, err := src.Value(ctx, h.Run.ID, ch.Key)
		switch {
		case err != nil:
			return err
		case ch.Absent && ok:
			return fmt.Errorf("key %q holds %s, want none", ch.Key, compact(v))
		case !ch.Absent && !ok:
			return fmt.Errorf("key %q holds nothing, want %s", ch.Key, compact(ch.Value))
		case !ch.Absent && !JSONEqual(v, ch.Value):
			return fmt.Errorf("key %q holds %s, want %s", ch.Key, compact(v), compact(ch.Value))
		}
		return nil
	case CheckStream:
		evs, err := src.Stream(ctx, h.Run.ID)
		if err != nil {
			return err
		}
		return MatchStream(ch.Events, evs)
	case CheckTakeover:
		if err := checkTakeover(h, f, ch.MaxSecondsAfterKill); err != nil || ch.Step == "" {
			return err
		}
		return checkLostAttempts(h, ch.Step)
	case CheckRecorded:
		return checkRecorded(h)
	}
	return fmt.Errorf("unknown check %q", ch.Check)
}

// gapSlack absorbs the rounding of recorded times: a gap may fall short of
// its backoff by this much.
const gapSlack = 5 * time.Millisecond

func checkBackoff(h *History, step string, minGaps []int) error {
	i := slices.IndexFunc(h.Ops, func(o Op) bool { return o.Kind == "step" && o.Name == step })
	if i < 0 {
		return fmt.Errorf("no step %q", step)
	}
	op := h.Ops[i]
	if len(op.AttemptLog) != len(minGaps) {
		return fmt.Errorf("step %q has %d failed attempts, want %d", step, len(op.AttemptLog), len(minGaps))
	}
	var last *time.Time
	if op.Done && op.Error == nil {
		if op.AttemptStartedAt == nil {
			return fmt.Errorf("step %q: no attempt_started_at for the attempt that succeeded", step)
		}
		last = op.AttemptStartedAt
	}
	for n, want := range minGaps {
		var next time.Time
		switch {
		case n+1 < len(op.AttemptLog):
			next = op.AttemptLog[n+1].StartedAt
		case last != nil:
			next = *last
		default:
			return fmt.Errorf("step %q: no start of attempt %d", step, n+2)
		}
		gap := next.Sub(op.AttemptLog[n].FinishedAt)
		if gap+gapSlack < time.Duration(want)*time.Millisecond {
			return fmt.Errorf("step %q: %s between attempts %d and %d, want at least %dms", step, gap.Round(time.Millisecond), n+1, n+2, want)
		}
	}
	return nil
}

func checkTimerDue(h *History, minMS int) error {
	i := slices.IndexFunc(h.Ops, func(o Op) bool { return o.Kind == "timer" })
	if i < 0 {
		return errors.New("no timer op")
	}
	var due time.Time
	if err := json.Unmarshal(h.Ops[i].Result, &due); err != nil {
		return fmt.Errorf("the timer's result %s is not an RFC 3339 time", compact(h.Ops[i].Result))
	}
	if d := due.Sub(h.Run.CreatedAt); d < time.Duration(minMS)*time.Millisecond {
		return fmt.Errorf("the timer is due %s after the run's creation, want at least %dms", d.Round(time.Millisecond), minMS)
	}
	if f := h.Run.FinishedAt; f == nil || f.Before(due) {
		return fmt.Errorf("the run ended at %v, before its timer was due (%v)", f, due)
	}
	return nil
}

func checkChildren(parent string, kids []Run, workflow string, outputs []json.RawMessage, maxRunning int) error {
	if len(kids) != len(outputs) {
		return fmt.Errorf("%d child runs, want %d", len(kids), len(outputs))
	}
	for i, k := range kids {
		switch {
		case k.Workflow != workflow:
			return fmt.Errorf("child %d runs %q, want %q", i, k.Workflow, workflow)
		case k.ParentID != parent:
			return fmt.Errorf("child %d has parent_id %q, want %q", i, k.ParentID, parent)
		case k.Status != "succeeded":
			return fmt.Errorf("child %d is %s, want succeeded", i, k.Status)
		case !JSONEqual(k.Output, outputs[i]):
			return fmt.Errorf("child %d output %s, want %s", i, compact(k.Output), compact(outputs[i]))
		}
	}
	if maxRunning > 0 {
		n, at, err := MaxRunning(kids)
		if err != nil {
			return err
		}
		if n > maxRunning {
			return fmt.Errorf("%d children ran at once (at %s), want at most %d", n, at.Format(time.RFC3339Nano), maxRunning)
		}
	}
	return nil
}

// MaxRunning is the most runs that ran at one instant, each from its
// started_at to its finished_at (a run that ends at the instant another starts
// is not counted with it), and that instant.
func MaxRunning(runs []Run) (int, time.Time, error) {
	type edge struct {
		at    time.Time
		delta int
	}
	var edges []edge
	for _, r := range runs {
		if r.StartedAt == nil || r.FinishedAt == nil {
			return 0, time.Time{}, fmt.Errorf("run %s has no started_at or finished_at", r.ID)
		}
		edges = append(edges, edge{*r.StartedAt, 1}, edge{*r.FinishedAt, -1})
	}
	sort.Slice(edges, func(i, j int) bool {
		if !edges[i].at.Equal(edges[j].at) {
			return edges[i].at.Before(edges[j].at)
		}
		return edges[i].delta < edges[j].delta // ends before starts
	})
	n, most, when := 0, 0, time.Time{}
	for _, e := range edges {
		n += e.delta
		if n > most {
			most, when = n, e.at
		}
	}
	return most, when, nil
}

// MatchStream checks a stream against its patterns, event for event.
func MatchStream(want []StreamPattern, got []StreamEvent) error {
	names := func() string {
		var s []string
		for _, e := range got {
			s = append(s, e.Event)
		}
		return strings.Join(s, ", ")
	}
	for i, w := range want {
		if i >= len(got) {
			return fmt.Errorf("event %d missing: want %s; the stream holds %s", i+1, w.Event, names())
		}
		g := got[i]
		switch {
		case g.Event != w.Event:
			return fmt.Errorf("event %d is %s, want %s; the stream holds %s", i+1, g.Event, w.Event, names())
		case w.Data != nil && !JSONEqual(g.Data, w.Data):
			return fmt.Errorf("event %d (%s) has data %s, want %s", i+1, g.Event, compact(g.Data), compact(w.Data))
		case w.DataHas != nil && !JSONHas(g.Data, w.DataHas):
			return fmt.Errorf("event %d (%s) has data %s, want one with %s", i+1, g.Event, compact(g.Data), compact(w.DataHas))
		}
	}
	if len(got) > len(want) {
		return fmt.Errorf("%d events, want %d; the stream holds %s", len(got), len(want), names())
	}
	return nil
}

func checkTakeover(h *History, f Facts, maxSeconds float64) error {
	if f.KilledAt.IsZero() {
		return errors.New("the worker was never killed")
	}
	end := h.Run.FinishedAt
	if end == nil {
		return errors.New("no finished_at")
	}
	if d := end.Sub(f.KilledAt); d > time.Duration(maxSeconds*float64(time.Second)) {
		return fmt.Errorf("the run ended %s after the kill, want at most %gs", d.Round(time.Millisecond), maxSeconds)
	}
	return nil
}

// checkLostAttempts: the step a kill interrupted logged only lost attempts,
// numbered 1 to n (n is 0 when the worker's heartbeat had not reported the step
// before the kill), and the attempt that completed it is numbered n+1: the
// worker numbered its attempt after those the server recorded.
func checkLostAttempts(h *History, step string) error {
	for _, op := range h.Ops {
		if op.Kind != "step" || op.Name != step {
			continue
		}
		for i, a := range op.AttemptLog {
			if a.Attempt != i+1 || a.Outcome != "lost" {
				return fmt.Errorf("step %q: attempt_log[%d] is attempt %d with outcome %q, want attempt %d lost", step, i, a.Attempt, orNone(a.Outcome), i+1)
			}
		}
		if want := len(op.AttemptLog) + 1; op.Attempts != want {
			return fmt.Errorf("step %q: %d attempts with %d lost, want %d: the next attempt is numbered after the lost ones", step, op.Attempts, len(op.AttemptLog), want)
		}
		return nil
	}
	return fmt.Errorf("no step %q", step)
}

// checkRecorded: the output's now and uuid are the recorded now and uuid ops'
// results, and the random op's result is a JSON integer in [0, 2^64).
func checkRecorded(h *History) error {
	var out struct {
		Now  string `json:"now"`
		UUID string `json:"uuid"`
	}
	if err := json.Unmarshal(h.Run.Output, &out); err != nil {
		return fmt.Errorf("output %s is not {\"now\", \"uuid\"}", compact(h.Run.Output))
	}
	byKind := map[string]Op{}
	for _, o := range h.Ops {
		byKind[o.Kind] = o
	}
	var rec string
	if err := json.Unmarshal(byKind["now"].Result, &rec); err != nil {
		return fmt.Errorf("now's result %s is not a string", compact(byKind["now"].Result))
	}
	recAt, err1 := time.Parse(time.RFC3339Nano, rec)
	outAt, err2 := time.Parse(time.RFC3339Nano, out.Now)
	switch {
	case err1 != nil:
		return fmt.Errorf("now's result %q is not RFC 3339", rec)
	case err2 != nil:
		return fmt.Errorf("output now %q is not RFC 3339", out.Now)
	case !recAt.Equal(outAt):
		return fmt.Errorf("output now %s, recorded %s", out.Now, rec)
	}
	if err := json.Unmarshal(byKind["uuid"].Result, &rec); err != nil {
		return fmt.Errorf("uuid's result %s is not a string", compact(byKind["uuid"].Result))
	}
	if _, err := uuid.Parse(rec); err != nil {
		return fmt.Errorf("uuid's result %q is not a UUID", rec)
	}
	if rec != out.UUID {
		return fmt.Errorf("output uuid %q, recorded %q", out.UUID, rec)
	}
	r := bytes.TrimSpace(byKind["random"].Result)
	n, ok := new(big.Int).SetString(string(r), 10)
	if !ok || n.Sign() < 0 || n.BitLen() > 64 {
		return fmt.Errorf("random's result %s is not a JSON integer in [0, 2^64)", compact(r))
	}
	return nil
}

// JSONEqual reports whether a and b are the same JSON value: objects compared
// by member, numbers by value (1 and 1.0 are equal), a missing value equal to
// null.
func JSONEqual(a, b json.RawMessage) bool {
	va, okA := decode(a)
	vb, okB := decode(b)
	return okA && okB && equal(va, vb)
}

// JSONHas reports whether got is an object holding every member of want,
// each JSON-equal.
func JSONHas(got, want json.RawMessage) bool {
	g, ok1 := decode(got)
	w, ok2 := decode(want)
	gm, ok3 := g.(map[string]any)
	wm, ok4 := w.(map[string]any)
	if !ok1 || !ok2 || !ok3 || !ok4 {
		return false
	}
	for k, v := range wm {
		gv, ok := gm[k]
		if !ok || !equal(gv, v) {
			return false
		}
	}
	return true
}

func decode(b json.RawMessage) (any, bool) {
	if len(bytes.TrimSpace(b)) == 0 {
		return nil, true
	}
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, false
	}
	return v, true
}

func equal(a, b any) bool {
	switch a := a.(type) {
	case json.Number:
		b, ok := b.(json.Number)
		if !ok {
			return false
		}
		ra, ok1 := new(big.Rat).SetString(a.String())
		rb, ok2 := new(big.Rat).SetString(b.String())
		return ok1 && ok2 && ra.Cmp(rb) == 0
	case map[string]any:
		b, ok := b.(map[string]any)
		if !ok || len(a) != len(b) {
			return false
		}
		for k, v := range a {
			w, ok := b[k]
			if !ok || !equal(v, w) {
				return false
			}
		}
		return true
	case []any:
		b, ok := b.([]any)
		if !ok || len(a) != len(b) {
			return false
		}
		for i := range a {
			if !equal(a[i], b[i]) {
				return false
			}
		}
		return true
	default:
		return a == b
	}
}

// compact is a JSON value on one line, "none" when missing, cut at 200 bytes.
func compact(b json.RawMessage) string {
	if len(bytes.TrimSpace(b)) == 0 {
		return "none"
	}
	var buf bytes.Buffer
	if json.Compact(&buf, b) != nil {
		return fmt.Sprintf("%q", b)
	}
	s := buf.String()
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}
