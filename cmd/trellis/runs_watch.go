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
		"It ends after the final event; a finished run's stream is replayed."
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
		return nil
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
