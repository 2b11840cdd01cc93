package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strconv"

	"github.com/trellis-dev/trellis"
)

// runsWatch is "trellis runs watch RUN [--after N|now] [--json]": the run's
// stream, live, until its final event.
func runsWatch(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var (
		afterFlag string
		asJSON    bool
	)
	about := "Print a run's stream as it happens: the events its workflow emits and its lifecycle\n" +
		"(run.started, step.completed, step.failed, run.waiting, run.resumed, run.blocked, and\n" +
		"the final run.succeeded, run.failed or run.cancelled), one per line: SEQUENCE NAME DATA.\n" +
		"It ends after the final event; a finished run's stream is replayed. It exits 0 when\n" +
		"the run succeeded, 8 when it failed or was cancelled (its error on stderr)."
	return withRun(ctx, "watch", about, args, stderr, func(fs *flag.FlagSet) {
		fs.StringVar(&afterFlag, "after", "0", "start after this event `sequence`, or \"now\" for new events only")
		fs.BoolVar(&asJSON, "json", false, "print each event as a JSON line")
	}, func(c *trellis.Client, ref string) error {
		after, err := parseAfter(afterFlag)
		if err != nil {
			return &usageError{msg: "runs watch: " + err.Error(), cmd: "runs watch"}
		}
		for ev, err := range c.Stream(ctx, ref, after) {
			if err != nil {
				return refError(ref, err)
			}
			if asJSON {
				if err := json.NewEncoder(stdout).Encode(ev); err != nil {
					return err
				}
				continue
			}
			data := ev.Data
			if len(data) == 0 {
				data = json.RawMessage("null")
			}
			if _, err := fmt.Fprintf(stdout, "%d %s %s\n", ev.Sequence, ev.Name, data); err != nil {
				return err
			}
		}
		return runOutcome(ctx, c, ref)
	})
}

// runOutcome is nil when the run succeeded (or has not ended), else a
// runEndedError: the exit status of a command whose success is the run's.
func runOutcome(ctx context.Context, c *trellis.Client, ref string) error {
	run, err := c.Get(ctx, ref)
	if err != nil {
		return refError(ref, err)
	}
	return endedBadly(run)
}

func endedBadly(run *trellis.Run) error {
	if run.Status == trellis.StatusFailed || run.Status == trellis.StatusCancelled {
		return &runEndedError{run: run}
	}
	return nil
}

// runsResult is "trellis runs result RUN [--json]": wait until the run ends and
// print its output.
func runsResult(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var asJSON bool
	about := "Wait until a run ends, then print its output (JSON) on stdout. It exits 0 when the\n" +
		"run succeeded, 8 when it failed or was cancelled (its error on stderr); Ctrl-C stops\n" +
		"waiting (130) and leaves the run as it is."
	return withRun(ctx, "result", about, args, stderr, func(fs *flag.FlagSet) {
		fs.BoolVar(&asJSON, "json", false, "print the whole run as JSON instead of its output alone")
	}, func(c *trellis.Client, ref string) error {
		run, err := c.Wait(ctx, ref)
		if err != nil {
			return refError(ref, err)
		}
		if asJSON {
			if err := writeJSON(stdout, run); err != nil {
				return err
			}
		} else if run.Status == trellis.StatusSucceeded {
			out := payloadText(run.Output)
			if out == "" {
				out = "null"
			}
			if _, err := fmt.Fprintln(stdout, out); err != nil {
				return err
			}
		}
		return endedBadly(run)
	})
}

// parseAfter reads --after: a sequence (0 or more) or "now".
func parseAfter(s string) (int64, error) {
	if s == "now" {
		return trellis.StreamNow, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("--after must be an event sequence (0 or more) or \"now\", got %q", s)
	}
	return n, nil
}
