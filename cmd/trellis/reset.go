package main

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/trellis-dev/trellis"
)

// runsReset is "trellis runs reset RUN --to STEP": Client.Reset from the command line.
func runsReset(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var to string
	var asJSON bool
	about := "Start a new run of a finished run's workflow, with its workflow ID and input, that\n" +
		"keeps the history recorded before step --to and executes again from that step\n" +
		"(without --to: from the beginning). The old run is left as it was."
	return withRun(ctx, "reset", about, args, stderr, func(fs *flag.FlagSet) {
		fs.StringVar(&to, "to", "", "the `step` to execute again (its first op); empty: start over")
		fs.BoolVar(&asJSON, "json", false, "print the new run as JSON")
	}, func(c *trellis.Client, ref string) error {
		run, err := c.Reset(ctx, ref, to)
		if err != nil {
			return refError(ref, err)
		}
		if asJSON {
			return writeJSON(stdout, run)
		}
		fmt.Fprintf(stdout, "run %s reset: new run %s is pending\n", ref, run.ID)
		return printRun(stdout, run)
	})
}
