package main

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/trellis-dev/trellis"
)

// How runs are shown: tables and key-value blocks for people, JSON for scripts.
// In JSON, inputs, outputs and results appear as JSON values when they are JSON
// (the default codec), as strings when they are other UTF-8 text, and base64
// strings otherwise.

const (
	detailWidth = 70  // runs list: wait reason or error
	resultWidth = 100 // runs history: one op's result or error
)

// Times are printed in UTC as RFC 3339: to the millisecond in a run's fields and
// history (as the engine writes them into wait reasons), to the second in tables.
const (
	timeLayout      = "2006-01-02T15:04:05.000Z07:00"
	tableTimeLayout = time.RFC3339
)

// tableTime formats a time for a table column.
func tableTime(t time.Time) string { return t.UTC().Format(tableTimeLayout) }

func newTable(w io.Writer) *tabwriter.Writer { return tabwriter.NewWriter(w, 0, 0, 2, ' ', 0) }

// printRunTable prints a page of runs on w, and the cursor of the next page
// on stderr (stdout holds only the data, for a pipe).
func printRunTable(w, stderr io.Writer, page *trellis.RunPage) error {
	if len(page.Runs) == 0 {
		fmt.Fprintln(w, "no runs")
		return nil
	}
	tw := newTable(w)
	// CLAIMS: how many times a worker took the run (a step's attempts are in history).
	fmt.Fprintln(tw, "ID\tWORKFLOW ID\tWORKFLOW\tSTATUS\tCLAIMS\tCREATED\tREASON / ERROR")
	for _, r := range page.Runs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\n", r.ID, oneLine(r.WorkflowID, 0), r.Workflow, r.Status,
			r.Attempts, tableTime(r.CreatedAt), oneLine(runDetail(r), detailWidth))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	printNextCursor(stderr, page.NextCursor)
	return nil
}

// printNextCursor tells, on stderr, how to ask for the next page, if any.
func printNextCursor(stderr io.Writer, cursor string) {
	if cursor != "" {
		fmt.Fprintf(stderr, "next cursor: %s\n", cursor)
	}
}

// runDetail says why a run waits or how it failed; empty otherwise.
func runDetail(r *trellis.Run) string {
	switch {
	case r.WaitReason != "":
		return r.WaitReason
	case r.Error != nil:
		return r.Error.Message
	case r.CancelRequested && !r.Status.Terminal():
		return "cancel requested"
	}
	return ""
}

// currentStepText says which step a running run executes, as its lease
// heartbeat last reported it.
func currentStepText(s *trellis.CurrentStep) string {
	if s == nil {
		return ""
	}
	return fmt.Sprintf("%s, attempt %d, since %s", s.Name, s.Attempt, timeText(&s.Since))
}

// printRun prints every field of a run, one per line.
func printRun(w io.Writer, r *trellis.Run) error {
	rows := [][2]string{
		{"ID", r.ID}, {"Workflow ID", r.WorkflowID}, {"Workflow", r.Workflow},
		{"Namespace", r.Namespace}, {"Queue", r.Queue}, {"Priority", strconv.Itoa(r.Priority)},
		{"Version", versionText(r)},
		{"Status", string(r.Status)}, {"Wait reason", r.WaitReason}, {"Error", errorText(r.Error)},
		{"Cancel requested", strconv.FormatBool(r.CancelRequested)}, {"Claims", strconv.Itoa(r.Attempts) + " (times a worker took the run)"},
		{"Workflow attempt", workflowAttemptText(r)}, {"Retry policy", retryPolicyText(r.Retry)},
		{"Deadline", timeText(r.Deadline)}, {"Available at", timeText(&r.AvailableAt)},
		{"Lease owner", r.LeaseOwner}, {"Lease expires at", timeText(r.LeaseExpiresAt)},
		{"Current step", currentStepText(r.CurrentStep)},
		{"Created at", timeText(&r.CreatedAt)}, {"Started at", timeText(r.StartedAt)},
		{"Updated at", timeText(&r.UpdatedAt)}, {"Finished at", timeText(r.FinishedAt)},
		{"Input", payloadText(r.Input)}, {"Output", payloadText(r.Output)},
	}
	tw := newTable(w)
	for _, row := range rows {
		v := row[1]
		if v == "" {
			v = "-"
		}
		// Continuation lines (a panic's stack, multi-line text) stay in the value column.
		fmt.Fprintf(tw, "%s:\t%s\n", row[0], strings.ReplaceAll(v, "\n", "\n\t"))
	}
	return tw.Flush()
}

// printHistory prints a run's ops, each failed attempt (and the one that
// succeeded after them) indented under its op.
func printHistory(w io.Writer, r *trellis.Run, ops []*trellis.Op) error {
	fmt.Fprintf(w, "run %s  workflow %s  workflow ID %s  %s\n", r.ID, r.Workflow, r.WorkflowID, r.Status)
	if d := runDetail(r); d != "" {
		fmt.Fprintf(w, "  %s\n", oneLine(d, 0))
	}
	fmt.Fprintln(w)
	if len(r.WorkflowAttempts) > 0 {
		printRunAttempts(w, r)
		fmt.Fprintln(w)
	}
	if len(ops) == 0 {
		// A finished run without ops is most often a job whose first attempt
		// succeeded: it records its outcome only (docs/jobs.md).
		if r.Status.Terminal() {
			fmt.Fprintln(w, "no ops recorded (a job whose first attempt succeeded records none)")
		} else {
			fmt.Fprintln(w, "no ops recorded yet")
		}
		return nil
	}
	tw := newTable(w)
	fmt.Fprintln(tw, "POS\tKIND\tNAME\tSTEP ATTEMPTS\tRESULT / ERROR")
	for _, op := range ops {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\n", op.Position, op.Kind, orDash(op.Name), stepAttempts(op), opOutcome(op))
		for _, a := range op.AttemptLog {
			fmt.Fprintf(tw, "\t\t\t\t  attempt %d %s at %s: %s\n",
				a.Attempt, attemptVerb(a.Outcome), timeText(&a.FinishedAt), oneLine(a.Error.Message, resultWidth))
		}
		if a := op.AttemptStartedAt; a != nil && op.FinishedAt != nil {
			fmt.Fprintf(tw, "\t\t\t\t  attempt %d started at %s, succeeded in %s\n",
				op.Attempts, timeText(a), op.FinishedAt.Sub(*a).Round(time.Millisecond))
		}
	}
	return tw.Flush()
}

// attemptVerb says how an attempt of a step's log ended.
func attemptVerb(outcome string) string {
	switch outcome {
	case trellis.AttemptLost:
		return "lost (lease expired)"
	case trellis.AttemptTimedOut:
		return "timed out (lease ended)"
	case trellis.AttemptStarted:
		return "started, not ended,"
	}
	return "failed"
}

// workflowAttemptText is the run's attempt of its workflow function, with how
// many failed before it (workflow retries).
func workflowAttemptText(r *trellis.Run) string {
	n := max(r.WorkflowAttempt, 1)
	switch failed := len(r.WorkflowAttempts); {
	case failed == 0:
		return strconv.Itoa(n)
	case failed == 1:
		return fmt.Sprintf("%d (1 failed attempt retried: runs history lists it)", n)
	default:
		return fmt.Sprintf("%d (%d failed attempts retried: runs history lists them)", n, failed)
	}
}

// retryPolicyText shows the workflow retry policy a run was started with.
func retryPolicyText(p *trellis.RunRetry) string {
	if p == nil {
		return "" // the workflow's, if it declares one
	}
	s := fmt.Sprintf("%d attempts", p.MaxAttempts)
	if p.InitialBackoff > 0 {
		s += ", backoff from " + p.InitialBackoff.String()
	}
	if p.Factor > 0 {
		s += fmt.Sprintf(" x%g", p.Factor)
	}
	if p.MaxBackoff > 0 {
		s += " up to " + p.MaxBackoff.String()
	}
	if len(p.NonRetryableTypes) > 0 {
		s += ", not retried: " + strings.Join(p.NonRetryableTypes, ", ")
	}
	return s
}

// printRunAttempts lists a run's attempts of its workflow function: each
// failed one a workflow retry followed, with its error, its times and the
// failed steps the next attempt ran again, then the current one.
func printRunAttempts(w io.Writer, r *trellis.Run) {
	fmt.Fprintln(w, "run attempts (workflow retries):")
	for _, a := range r.WorkflowAttempts {
		fmt.Fprintf(w, "  attempt %d  started %s  failed %s: %s\n", a.Attempt, timeText(&a.StartedAt), timeText(&a.FailedAt),
			oneLine(a.Error.Message, resultWidth))
		line := "retried at " + timeText(&a.RetryAt)
		if len(a.Steps) > 0 {
			var steps []string
			for _, st := range a.Steps {
				steps = append(steps, fmt.Sprintf("%s (position %d, %d attempts)", orDash(st.Name), st.Position, st.Attempts))
			}
			line += "; failed steps run again: " + strings.Join(steps, ", ")
		}
		fmt.Fprintf(w, "      %s\n", line)
	}
	last := r.WorkflowAttempts[len(r.WorkflowAttempts)-1]
	fmt.Fprintf(w, "  attempt %d  due %s  %s\n", max(r.WorkflowAttempt, len(r.WorkflowAttempts)+1), timeText(&last.RetryAt), r.Status)
}

// stepAttempts is how many times a step's function ran; "-" for other ops.
func stepAttempts(op *trellis.Op) string {
	if op.Kind != trellis.OpStep {
		return "-"
	}
	return strconv.Itoa(op.Attempts)
}

func opOutcome(op *trellis.Op) string {
	switch {
	case !op.Done:
		return "(in progress)"
	case op.Error != nil:
		return "error: " + oneLine(op.Error.Message, resultWidth)
	case len(op.Result) == 0:
		return "-"
	}
	return oneLine(payloadText(op.Result), resultWidth)
}

func errorText(e *trellis.ErrorInfo) string {
	if e == nil {
		return ""
	}
	s := e.Message
	if t := errorType(e.Type); t != "" {
		s += " (type " + t + ")"
	}
	if e.NonRetryable {
		s += " (non-retryable)"
	}
	return s
}

// errorType is a recorded error type worth showing: an engine code or a named Go
// type, not the anonymous carriers of errors.New and fmt.Errorf that older runs
// recorded (*errors.errorString, *fmt.wrapError).
func errorType(t string) string {
	if strings.HasPrefix(t, "*errors.") || strings.HasPrefix(t, "*fmt.") || t == "*trellis.nonRetryable" {
		return ""
	}
	return t
}

// payloadText shows an encoded payload as text when it is JSON or UTF-8.
func payloadText(b []byte) string {
	switch {
	case len(b) == 0:
		return ""
	case json.Valid(b), utf8.Valid(b):
		return string(b)
	}
	return fmt.Sprintf("(%d bytes, base64) %s", len(b), base64.StdEncoding.EncodeToString(b))
}

func timeText(t *time.Time) string {
	if t == nil || t.IsZero() {
		return ""
	}
	return t.UTC().Format(timeLayout)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// oneLine keeps the first line of s, shortened to limit runes (0: no limit).
func oneLine(s string, limit int) string {
	if i := strings.IndexAny(s, "\r\n"); i >= 0 {
		s = s[:i] + " …"
	}
	s = strings.ReplaceAll(s, "\t", " ")
	if limit > 0 && utf8.RuneCountInString(s) > limit {
		s = string([]rune(s)[:limit-1]) + "…"
	}
	return s
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// versionText is a run's version, and whether the run is pinned to it.
func versionText(r *trellis.Run) string {
	if r.Pinned {
		return strconv.Itoa(r.Version) + " (pinned: only a worker that serves it runs the run)"
	}
	return strconv.Itoa(r.Version)
}
