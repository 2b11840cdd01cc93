package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/trellis-dev/trellis"
)

const workersUsage = `Usage: trellis workers <subcommand> [arguments] --store URL|--server URL [--namespace NS]

Subcommands:
  list      list the workers of a namespace: what they serve, when they were last seen

A worker records itself in the store when it starts, refreshes the record with each
heartbeat (every third of its lease, 10s by default) and removes it when it stops
gracefully. A worker not seen for a lease duration is no longer live: its runs are
taken over by other workers. Records of workers gone for an hour are deleted.
`

func runWorkers(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	printUsage := func(w io.Writer) { fmt.Fprint(w, workersUsage) }
	if len(args) == 0 {
		return &usageError{msg: "workers: no subcommand given", cmd: "workers"}
	}
	switch sub, rest := args[0], args[1:]; sub {
	case "list":
		return workersList(ctx, rest, stdout, stderr)
	case "help", "-h", "-help", "--help":
		return &helpError{usage: printUsage}
	default:
		return &usageError{msg: fmt.Sprintf("workers: unknown subcommand %q", sub), cmd: "workers"}
	}
}

func workersList(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("workers list", "workers list --store URL|--server URL [--namespace NS] [--json]",
		"List the workers of a namespace by name, live or not.", stderr)
	var tg target
	var asJSON bool
	targetFlags(fs, &tg)
	fs.BoolVar(&asJSON, "json", false, "print the workers as JSON")
	pos, err := parseArgs(fs, args)
	switch {
	case err != nil:
		return err
	case len(pos) > 0:
		return usagef(fs, "workers list: unexpected argument %q", pos[0])
	}
	if err := tg.resolve(fs); err != nil {
		return err
	}
	namespace := tg.ns()
	return withClient(ctx, tg, func(c *trellis.Client) error {
		ws, err := c.Workers(ctx)
		if err != nil {
			return err
		}
		if asJSON {
			return writeJSON(stdout, struct {
				Workers []*trellis.WorkerRecord `json:"workers"`
			}{ws})
		}
		return printWorkerTable(stdout, namespace, ws, time.Now())
	})
}

func printWorkerTable(w io.Writer, namespace string, ws []*trellis.WorkerRecord, now time.Time) error {
	if len(ws) == 0 {
		fmt.Fprintf(w, "no workers in namespace %q\n", namespace)
		return nil
	}
	tw := newTable(w)
	fmt.Fprintln(tw, "NAME\tLIVE\tLAST SEEN\tWORKFLOWS\tQUEUES\tVERSION\tOWNER\tSTARTED")
	for _, wk := range ws {
		live, queues := "no", "all"
		if wk.Live {
			live = "yes"
		}
		if len(wk.Queues) > 0 {
			queues = strings.Join(wk.Queues, ",")
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", wk.Name, live, seenText(wk.LastSeenAt, now),
			orDash(strings.Join(wk.Workflows, ",")), queues, orDash(wk.Version), orDash(wk.Owner),
			wk.StartedAt.Local().Format(time.DateTime))
	}
	return tw.Flush()
}

// seenText is a time with how long ago it was, in whole seconds.
func seenText(t, now time.Time) string {
	ago := max(now.Sub(t), 0).Round(time.Second)
	return fmt.Sprintf("%s (%s ago)", t.Local().Format(time.DateTime), ago)
}
