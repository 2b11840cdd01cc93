package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/trellis-dev/trellis"
	"github.com/trellis-dev/trellis/store"
)

// startArgs are the parsed arguments of runs start.
type startArgs struct {
	target   target
	workflow string
	input    string
	opts     trellis.StartOptions
	asJSON   bool
}

func parseStartArgs(args []string, stderr io.Writer) (*startArgs, *flag.FlagSet, error) {
	fs := newFlagSet("runs start", "runs start WORKFLOW --input JSON --store URL|--server URL [flags]",
		"Start a run of a workflow by name. This process holds no workflow code: a worker that\n"+
			"registered WORKFLOW runs it. An unregistered name's run goes to --queue (default\n"+
			"\"default\") with version 0. --version pins the run to a version: it waits until a\n"+
			"worker that serves that version runs it.", stderr)
	var sa startArgs
	var startAt, deadline, retry string
	targetFlags(fs, &sa.target)
	fs.StringVar(&sa.input, "input", "null", "the workflow's input, as `JSON`")
	fs.StringVar(&sa.opts.ID, "id", "", "workflow `ID`, the caller's key for the run (default: the run ID)")
	fs.StringVar(&sa.opts.Queue, "queue", "", "`queue` to start on (default: the workflow's, else \"default\")")
	fs.IntVar(&sa.opts.Priority, "priority", 0, "higher runs are claimed first among due runs")
	fs.IntVar(&sa.opts.Version, "version", 0, "pin the run to this workflow `version`: only a worker that serves it runs it (0: not pinned)")
	fs.StringVar(&startAt, "start-at", "", "do not start the run before this `time` (RFC 3339, e.g. 2026-01-02T15:04:05Z)")
	fs.StringVar(&deadline, "deadline", "", "fail the run if it has not finished by this `time` (RFC 3339)")
	fs.StringVar(&retry, "retry", "", "the run's workflow retry policy, as the API's `JSON` retry object, e.g.\n"+
		`{"max_attempts": 3, "initial_backoff": "30s"} (docs/workflow-retries.md)`)
	fs.BoolVar(&sa.asJSON, "json", false, "print the run as JSON")
	pos, err := parseArgs(fs, args)
	switch {
	case err != nil:
		return nil, fs, err
	case len(pos) == 0:
		return nil, fs, usagef(fs, "runs start: missing workflow name")
	case len(pos) > 1:
		return nil, fs, usagef(fs, "runs start: want one workflow name, got %d arguments", len(pos))
	case !json.Valid([]byte(sa.input)):
		return nil, fs, usagef(fs, "runs start: --input is not valid JSON: %s", sa.input)
	case sa.opts.Version < 0 || sa.opts.Version > store.MaxVersion:
		return nil, fs, usagef(fs, "runs start: --version %d: want 1 to %d (0: not pinned)", sa.opts.Version, store.MaxVersion)
	}
	sa.workflow = pos[0]
	if sa.opts.StartAt, err = parseTimeFlag("start-at", startAt); err != nil {
		return nil, fs, usagef(fs, "runs start: %v", err)
	}
	if sa.opts.Deadline, err = parseTimeFlag("deadline", deadline); err != nil {
		return nil, fs, usagef(fs, "runs start: %v", err)
	}
	if err := checkStartTimes(sa.opts, time.Now()); err != nil {
		return nil, fs, usagef(fs, "runs start: %v", err)
	}
	if retry != "" {
		var r trellis.RunRetry
		dec := json.NewDecoder(strings.NewReader(retry))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&r); err != nil {
			return nil, fs, usagef(fs, "runs start: --retry: %v", err)
		}
		if err := r.Validate(); err != nil {
			return nil, fs, usagef(fs, "runs start: --retry: %v", err)
		}
		sa.opts.Retry = trellis.RetryPolicyOf(&r)
	}
	return &sa, fs, sa.target.resolve(fs)
}

// parseTimeFlag parses an RFC 3339 time; empty is the zero time.
func parseTimeFlag(name, s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("--%s %q: want an RFC 3339 time such as 2026-01-02T15:04:05Z", name, s)
	}
	return t, nil
}

// checkStartTimes rejects a deadline that has passed, or that comes before the start.
func checkStartTimes(o trellis.StartOptions, now time.Time) error {
	switch {
	case o.Deadline.IsZero():
		return nil
	case !o.Deadline.After(now):
		return fmt.Errorf("--deadline %s has passed", o.Deadline.Format(time.RFC3339))
	case !o.StartAt.IsZero() && !o.Deadline.After(o.StartAt):
		return fmt.Errorf("--deadline %s is not after --start-at %s", o.Deadline.Format(time.RFC3339), o.StartAt.Format(time.RFC3339))
	}
	return nil
}

func runsStart(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	sa, _, err := parseStartArgs(args, stderr)
	if err != nil {
		return err
	}
	return withClient(ctx, sa.target, func(c *trellis.Client) error {
		run, err := c.StartRaw(ctx, sa.workflow, []byte(sa.input), sa.opts)
		if err != nil {
			return err
		}
		run = readBack(ctx, c, run)
		if sa.asJSON {
			return writeJSON(stdout, run)
		}
		return printRun(stdout, run)
	})
}

// readBack returns a run just started as a read shows it: with the wait reason a
// read computes for a pending run, so that a start of a workflow no live worker
// serves (a typo, say) says so. The run is started either way: when the read
// fails, the start's record is returned.
func readBack(ctx context.Context, c *trellis.Client, run *trellis.Run) *trellis.Run {
	if read, err := c.Get(ctx, run.ID); err == nil {
		return read
	}
	return run
}
