// Package conformance is the Trellis conformance kit: the workflows every SDK's
// kit worker registers, what a runner does to their runs and what it expects of
// them, described once in the language-neutral kit.json (embedded here), and the
// checks of a run against it. `trellis conformance` (cmd/trellis) runs it against
// a server and a worker command; docs/conformance.md is its guide for SDK authors.
package conformance

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"fmt"
	"slices"
)

// Format is the kit file's format tag.
const Format = "trellis.conformance/v1"

//go:embed kit.json
var kitJSON []byte

// KitJSON returns the kit file as embedded.
func KitJSON() []byte { return bytes.Clone(kitJSON) }

// Kit is the conformance kit.
type Kit struct {
	Format string `json:"format"`
	About  string `json:"about"`
	// LeaseSeconds is the lease the runner gives the worker
	// (TRELLIS_LEASE_SECONDS): the takeover case's timing rests on it.
	LeaseSeconds int     `json:"lease_seconds"`
	Cases        []*Case `json:"cases"`
}

// Case is one workflow of the kit and what becomes of its run.
type Case struct {
	// Name is the workflow's name, which the worker registers.
	Name  string          `json:"name"`
	Input json.RawMessage `json:"input"`
	// Actions are what the runner does to the run, in order.
	Actions []Action `json:"actions,omitempty"`
	Expect  Expect   `json:"expect"`
	// History is the run's history as a skeleton: one pattern per op, in
	// position order.
	History []OpPattern `json:"history"`
	Checks  []Check     `json:"checks,omitempty"`
}

// Action is something the runner does to a case's run.
type Action struct {
	// Do is "send_event" (Event with Payload, once the run is waiting),
	// "approve" (the pending approval request named Approval, once it
	// exists), "cancel" (once the run is waiting) or "kill_worker" (SIGKILL the
	// worker's process group DelayMS after step AfterStep is recorded done,
	// then start the worker command again).
	Do        string          `json:"do"`
	Event     string          `json:"event,omitempty"`
	Payload   json.RawMessage `json:"payload,omitempty"`
	Approval  string          `json:"approval,omitempty"`
	AfterStep string          `json:"after_step,omitempty"`
	DelayMS   int             `json:"delay_ms,omitempty"`
}

// Action kinds.
const (
	DoSendEvent  = "send_event"
	DoApprove    = "approve"
	DoCancel     = "cancel"
	DoKillWorker = "kill_worker"
)

// Expect is the run's expected end.
type Expect struct {
	// Status is the status the run ends in (or stays in: blocked).
	Status string `json:"status"`
	// Output, when given, is the run's output (JSON-equal).
	Output json.RawMessage `json:"output,omitempty"`
	// ErrorType and ErrorContains: the run's error's type, and a text its
	// message contains.
	ErrorType     string `json:"error_type,omitempty"`
	ErrorContains string `json:"error_contains,omitempty"`
	// MinDurationMS: the run lasts at least this long (created to finished).
	MinDurationMS int `json:"min_duration_ms,omitempty"`
}

// OpPattern is what one op of the history must be. Fields left out are not
// checked.
type OpPattern struct {
	// Optional: the op may be missing (then the pattern matches nothing).
	Optional bool   `json:"optional,omitempty"`
	Position *int   `json:"position,omitempty"`
	Kind     string `json:"kind"`
	Name     string `json:"name,omitempty"`
	Done     *bool  `json:"done,omitempty"`
	Attempts *int   `json:"attempts,omitempty"`
	// Result is the op's result (JSON-equal); ResultHas holds members the
	// result (an object) must have.
	Result    json.RawMessage `json:"result,omitempty"`
	ResultHas json.RawMessage `json:"result_has,omitempty"`
	// ErrorType is the type of the op's final error.
	ErrorType string `json:"error_type,omitempty"`
	// AttemptErrors are the messages of the failed attempts (attempt_log), in
	// order.
	AttemptErrors []string `json:"attempt_errors,omitempty"`
}

// Check is a check that needs code, beyond the run's end and history.
type Check struct {
	// Check names it: "backoff", "timer_due", "children", "value", "stream",
	// "takeover" or "recorded" (see docs/conformance.md).
	Check string `json:"check"`
	// backoff: the gaps between the attempts of Step are at least MinGapsMS.
	Step      string `json:"step,omitempty"`
	MinGapsMS []int  `json:"min_gaps_ms,omitempty"`
	// timer_due: the timer's due time is at least this long after the run's
	// creation, and the run ends after it.
	MinAfterCreatedMS int `json:"min_after_created_ms,omitempty"`
	// children: the child op at Position started runs of Workflow, in item
	// order, with these outputs and the case's run as parent; with
	// MaxRunning, at most that many ran at any instant.
	Position   *int              `json:"position,omitempty"`
	Workflow   string            `json:"workflow,omitempty"`
	Outputs    []json.RawMessage `json:"outputs,omitempty"`
	MaxRunning int               `json:"max_running,omitempty"`
	// value: the run-store value of Key is Value, or with Absent there is none.
	Key    string          `json:"key,omitempty"`
	Value  json.RawMessage `json:"value,omitempty"`
	Absent bool            `json:"absent,omitempty"`
	// stream: the run's stream holds exactly these events, in order.
	Events []StreamPattern `json:"events,omitempty"`
	// takeover: the run ended at most this long after the worker was killed;
	// with Step, the step the kill interrupted logged only lost attempts
	// (recorded by the server once the worker's heartbeat had reported the
	// step), numbered from 1, and its attempts count them and the one that
	// completed it.
	MaxSecondsAfterKill float64 `json:"max_seconds_after_kill,omitempty"`
}

// Check kinds.
const (
	CheckBackoff  = "backoff"
	CheckTimerDue = "timer_due"
	CheckChildren = "children"
	CheckValue    = "value"
	CheckStream   = "stream"
	CheckTakeover = "takeover"
	CheckRecorded = "recorded"
)

// StreamPattern is what one event of a run's stream must be: its name, and
// its data (JSON-equal) or members its data has.
type StreamPattern struct {
	Event   string          `json:"event"`
	Data    json.RawMessage `json:"data,omitempty"`
	DataHas json.RawMessage `json:"data_has,omitempty"`
}

// Load returns the embedded kit, checked.
func Load() (*Kit, error) { return Parse(kitJSON) }

// Parse reads and checks a kit file: no unknown fields, a known format, and
// cases that say what they must (Validate).
func Parse(b []byte) (*Kit, error) {
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	var k Kit
	if err := d.Decode(&k); err != nil {
		return nil, fmt.Errorf("conformance kit: %w", err)
	}
	if err := k.Validate(); err != nil {
		return nil, err
	}
	return &k, nil
}

var (
	statuses = []string{"succeeded", "failed", "cancelled", "blocked"}
	kinds    = []string{"step", "now", "uuid", "random", "patch", "set", "delete", "timer", "event", "approval", "child", "select", "emit"}
)

// Validate checks the kit's own consistency.
func (k *Kit) Validate() error {
	if k.Format != Format {
		return fmt.Errorf("conformance kit: format %q, want %q", k.Format, Format)
	}
	if k.LeaseSeconds <= 0 {
		return fmt.Errorf("conformance kit: lease_seconds must be positive")
	}
	seen := map[string]bool{}
	for i, c := range k.Cases {
		bad := func(format string, args ...any) error {
			return fmt.Errorf("conformance kit: case %d (%s): %s", i, c.Name, fmt.Sprintf(format, args...))
		}
		switch {
		case c.Name == "":
			return bad("no name")
		case seen[c.Name]:
			return bad("named twice")
		case !json.Valid(c.Input):
			return bad("input missing or not JSON")
		case !slices.Contains(statuses, c.Expect.Status):
			return bad("expect.status %q is not one of %v", c.Expect.Status, statuses)
		case c.Expect.Output != nil && c.Expect.Status != "succeeded":
			return bad("an output is expected of a run that does not succeed")
		}
		seen[c.Name] = true
		for j, a := range c.Actions {
			switch a.Do {
			case DoSendEvent:
				if a.Event == "" || !json.Valid(a.Payload) {
					return bad("action %d: send_event needs an event and a JSON payload", j)
				}
			case DoApprove:
				if a.Approval == "" {
					return bad("action %d: approve needs the approval's name", j)
				}
			case DoCancel:
			case DoKillWorker:
				if a.AfterStep == "" {
					return bad("action %d: kill_worker needs after_step", j)
				}
			default:
				return bad("action %d: unknown action %q", j, a.Do)
			}
		}
		if len(c.History) == 0 {
			return bad("no history skeleton")
		}
		for j, p := range c.History {
			if !slices.Contains(kinds, p.Kind) {
				return bad("history %d: unknown kind %q", j, p.Kind)
			}
		}
		for j, ch := range c.Checks {
			if err := ch.validate(); err != nil {
				return bad("check %d: %v", j, err)
			}
		}
	}
	return nil
}

func (ch *Check) validate() error {
	switch ch.Check {
	case CheckBackoff:
		if ch.Step == "" || len(ch.MinGapsMS) == 0 {
			return fmt.Errorf("backoff needs step and min_gaps_ms")
		}
	case CheckTimerDue:
		if ch.MinAfterCreatedMS <= 0 {
			return fmt.Errorf("timer_due needs min_after_created_ms")
		}
	case CheckChildren:
		if ch.Position == nil || ch.Workflow == "" || len(ch.Outputs) == 0 {
			return fmt.Errorf("children needs position, workflow and outputs")
		}
	case CheckValue:
		if ch.Key == "" || (ch.Value == nil) == !ch.Absent {
			return fmt.Errorf("value needs a key and one of value and absent")
		}
	case CheckStream:
		if len(ch.Events) == 0 {
			return fmt.Errorf("stream needs events")
		}
	case CheckTakeover:
		if ch.MaxSecondsAfterKill <= 0 {
			return fmt.Errorf("takeover needs max_seconds_after_kill")
		}
	case CheckRecorded:
	default:
		return fmt.Errorf("unknown check %q", ch.Check)
	}
	return nil
}

// Case returns the case of that name, or nil.
func (k *Kit) Case(name string) *Case {
	for _, c := range k.Cases {
		if c.Name == name {
			return c
		}
	}
	return nil
}

// Names lists the cases' names in kit order.
func (k *Kit) Names() []string {
	names := make([]string, len(k.Cases))
	for i, c := range k.Cases {
		names[i] = c.Name
	}
	return names
}

// Kills reports whether the case kills the worker (its run goes last, alone).
func (c *Case) Kills() bool {
	return slices.ContainsFunc(c.Actions, func(a Action) bool { return a.Do == DoKillWorker })
}
