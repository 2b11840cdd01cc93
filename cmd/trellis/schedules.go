package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/trellis-dev/trellis"
	"github.com/trellis-dev/trellis/store"
)

const schedulesUsage = `Usage: trellis schedules <subcommand> [arguments] --store URL|--server URL [--namespace NS]

Subcommands:
  create    create a schedule: NAME --workflow W --cron EXPR [--tz ZONE] [flags]
  list      list the namespace's schedules
  get       show one schedule: NAME
  update    change a schedule's spec: NAME [--workflow W] [--cron EXPR] [--tz ZONE] [flags]
  pause     pause a schedule: NAME
  resume    resume a paused schedule (missed ticks are not caught up): NAME
  trigger   start one run of a schedule now: NAME
  backfill  start the runs of a schedule's ticks in [--start, --end): NAME
  delete    delete a schedule (its runs stay): NAME

A schedule starts runs of a workflow on a cron expression (5 fields, 6 with
seconds first, or @hourly, @daily, @every 1m ...) read in an IANA time zone.
One scheduler among the servers and workers on a store fires it; see
docs/schedules.md for overlap policies, the catch-up window and daylight saving.
`

func runSchedules(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	printUsage := func(w io.Writer) { fmt.Fprint(w, schedulesUsage) }
	if len(args) == 0 {
		return &usageError{msg: "schedules: no subcommand given", cmd: "schedules"}
	}
	sub, rest := args[0], args[1:]
	switch sub {
	case "create", "update":
		return schedulesWrite(ctx, sub, rest, stdout, stderr)
	case "list":
		return schedulesSimple(ctx, sub, rest, false, stdout, stderr)
	case "get", "pause", "resume", "trigger", "delete":
		return schedulesSimple(ctx, sub, rest, true, stdout, stderr)
	case "backfill":
		return schedulesBackfill(ctx, rest, stdout, stderr)
	case "help", "-h", "-help", "--help":
		return &helpError{usage: printUsage}
	default:
		return &usageError{msg: fmt.Sprintf("schedules: unknown subcommand %q", sub), cmd: "schedules"}
	}
}

// specFlags are the flags of a schedule's spec; set records which were given.
type specFlags struct {
	spec  trellis.ScheduleSpec
	input string
	set   map[string]bool
}

func (sf *specFlags) add(fs *flag.FlagSet) {
	fs.StringVar(&sf.spec.Workflow, "workflow", "", "the `workflow` to start (registered with a worker of the namespace)")
	fs.StringVar(&sf.spec.Cron, "cron", "", "the cron `expression`, e.g. \"0 2 * * *\" or \"@every 1m\"")
	fs.StringVar(&sf.spec.TimeZone, "tz", "", "the IANA time `zone` the expression reads in (default UTC)")
	fs.StringVar(&sf.input, "input", "", "the runs' input, as `JSON` (default null)")
	fs.StringVar(&sf.spec.Queue, "queue", "", "the runs' `queue` (default: the workflow's, else \"default\")")
	fs.StringVar((*string)(&sf.spec.Overlap), "overlap", "", "`policy` while the previous run is active: skip (default), buffer_one, allow_all, cancel_previous")
	fs.DurationVar(&sf.spec.CatchupWindow, "catchup-window", 0, "how late a tick may still fire, e.g. 10m (default 1m)")
}

func schedulesWrite(ctx context.Context, sub string, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("schedules "+sub, "schedules "+sub+" NAME [--workflow W] [--cron EXPR] [--tz ZONE] [flags]",
		map[string]string{
			"create": "Create a schedule. --workflow and --cron are required.",
			"update": "Change a schedule's spec: the flags given replace those fields, the others stay.\nThe new spec fires from now on.",
		}[sub], stderr)
	var tg target
	var sf specFlags
	var paused, asJSON bool
	targetFlags(fs, &tg)
	sf.add(fs)
	if sub == "create" {
		fs.BoolVar(&paused, "paused", false, "create the schedule paused")
	}
	fs.BoolVar(&asJSON, "json", false, "print the schedule as JSON")
	pos, err := parseArgs(fs, args)
	switch {
	case err != nil:
		return err
	case len(pos) != 1:
		return usagef(fs, "schedules %s: want one schedule name, got %d arguments", sub, len(pos))
	case sf.input != "" && !json.Valid([]byte(sf.input)):
		return usagef(fs, "schedules %s: --input is not valid JSON: %s", sub, sf.input)
	case sub == "create" && (sf.spec.Workflow == "" || sf.spec.Cron == ""):
		return usagef(fs, "schedules create: --workflow and --cron are required")
	}
	sf.set = map[string]bool{}
	fs.Visit(func(f *flag.Flag) { sf.set[f.Name] = true })
	if err := tg.resolve(fs); err != nil {
		return err
	}
	name := pos[0]
	if sf.input != "" {
		sf.spec.Input = trellis.Payload(sf.input)
	}
	return withClient(ctx, tg, func(c *trellis.Client) error {
		var sc *trellis.Schedule
		var err error
		if sub == "create" {
			sc, err = c.CreateSchedule(ctx, name, sf.spec, trellis.CreateScheduleOptions{Paused: paused})
		} else {
			var cur *trellis.Schedule
			if cur, err = c.GetSchedule(ctx, name); err != nil {
				return err
			}
			sc, err = c.UpdateSchedule(ctx, name, sf.merge(cur.Spec))
		}
		if err != nil {
			return err
		}
		warnUnserved(ctx, c, sc, stderr)
		if asJSON {
			return writeJSON(stdout, sc)
		}
		return printSchedule(stdout, sc)
	})
}

// warnUnserved warns on stderr when no live worker serves the workflow of a
// schedule just written (a typo, or workers not deployed yet): the schedule
// is created anyway, and its runs wait, pending, with the same reason, as
// the run of `runs start` does. When the worker records cannot be read (a
// token without the reader role, say), it says nothing.
func warnUnserved(ctx context.Context, c *trellis.Client, sc *trellis.Schedule, stderr io.Writer) {
	ws, err := c.Workers(ctx)
	if err != nil {
		return
	}
	records := make([]*store.Worker, len(ws))
	for i, w := range ws {
		records[i] = &store.Worker{Namespace: w.Namespace, Name: w.Name, Workflows: w.Workflows, Queues: w.Queues,
			Versions: w.Versions, Live: w.Live}
	}
	run := &store.Run{Namespace: sc.Namespace, Workflow: sc.Spec.Workflow, Queue: sc.Spec.Queue}
	if reason := store.UnservedReason(run, records); reason != "" {
		fmt.Fprintf(stderr, "warning: %s: the schedule's runs will wait, pending, until one does\n", reason)
	}
}

// merge returns cur with the fields whose flags were given replaced.
func (sf *specFlags) merge(cur trellis.ScheduleSpec) trellis.ScheduleSpec {
	if sf.set["workflow"] {
		cur.Workflow = sf.spec.Workflow
	}
	if sf.set["cron"] {
		cur.Cron = sf.spec.Cron
	}
	if sf.set["tz"] {
		cur.TimeZone = sf.spec.TimeZone
	}
	if sf.set["input"] {
		cur.Input = sf.spec.Input
	}
	if sf.set["queue"] {
		cur.Queue = sf.spec.Queue
	}
	if sf.set["overlap"] {
		cur.Overlap = sf.spec.Overlap
	}
	if sf.set["catchup-window"] {
		cur.CatchupWindow = sf.spec.CatchupWindow
	}
	return cur
}

var simpleAbout = map[string]string{
	"list":    "List the namespace's schedules by name.",
	"get":     "Show one schedule: its spec, state and next tick.",
	"pause":   "Pause a schedule. Pausing a paused schedule is an error and changes nothing.",
	"resume":  "Resume a paused schedule; ticks missed while it was paused are not caught up.",
	"trigger": "Start one run of a schedule now, whatever its overlap policy, paused or not.",
	"delete":  "Delete a schedule. The runs it started stay.",
}

func schedulesSimple(ctx context.Context, sub string, args []string, named bool, stdout, stderr io.Writer) error {
	synopsis := "schedules " + sub + " NAME --store URL|--server URL [--json]"
	if !named {
		synopsis = "schedules " + sub + " --store URL|--server URL [--json]"
	}
	fs := newFlagSet("schedules "+sub, synopsis, simpleAbout[sub], stderr)
	var tg target
	var asJSON bool
	targetFlags(fs, &tg)
	fs.BoolVar(&asJSON, "json", false, "print the result as JSON")
	pos, err := parseArgs(fs, args)
	switch {
	case err != nil:
		return err
	case named && len(pos) != 1:
		return usagef(fs, "schedules %s: want one schedule name, got %d arguments", sub, len(pos))
	case !named && len(pos) > 0:
		return usagef(fs, "schedules %s: unexpected argument %q", sub, pos[0])
	}
	if err := tg.resolve(fs); err != nil {
		return err
	}
	return withClient(ctx, tg, func(c *trellis.Client) error {
		var (
			sc  *trellis.Schedule
			err error
		)
		switch sub {
		case "list":
			list, err := c.ListSchedules(ctx)
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(stdout, struct {
					Schedules []*trellis.Schedule `json:"schedules"`
				}{list})
			}
			return printScheduleTable(stdout, list)
		case "get":
			sc, err = c.GetSchedule(ctx, pos[0])
		case "pause":
			sc, err = c.PauseSchedule(ctx, pos[0])
		case "resume":
			sc, err = c.ResumeSchedule(ctx, pos[0])
		case "delete":
			if err := c.DeleteSchedule(ctx, pos[0]); err != nil {
				return err
			}
			fmt.Fprintf(stdout, "deleted schedule %s\n", pos[0])
			return nil
		case "trigger":
			run, err := c.TriggerSchedule(ctx, pos[0])
			if err != nil {
				return err
			}
			run = readBack(ctx, c, run)
			if asJSON {
				return writeJSON(stdout, run)
			}
			return printRun(stdout, run)
		}
		if err != nil {
			return err
		}
		if asJSON {
			return writeJSON(stdout, sc)
		}
		return printSchedule(stdout, sc)
	})
}

func schedulesBackfill(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("schedules backfill", "schedules backfill NAME --start TIME --end TIME --store URL|--server URL [--json]",
		fmt.Sprintf("Start the runs of the schedule's ticks in [--start, --end), at most %d, whatever its\n"+
			"overlap policy. A tick's run has the ID it has when the schedule fires it: a tick that\n"+
			"fired, or was backfilled, already is not started again.", trellis.MaxBackfillRuns), stderr)
	var tg target
	var start, end string
	var asJSON bool
	targetFlags(fs, &tg)
	fs.StringVar(&start, "start", "", "the first `time` (RFC 3339), inclusive")
	fs.StringVar(&end, "end", "", "the last `time` (RFC 3339), exclusive")
	fs.BoolVar(&asJSON, "json", false, "print the runs as JSON")
	pos, err := parseArgs(fs, args)
	switch {
	case err != nil:
		return err
	case len(pos) != 1:
		return usagef(fs, "schedules backfill: want one schedule name, got %d arguments", len(pos))
	case start == "" || end == "":
		return usagef(fs, "schedules backfill: --start and --end are required")
	}
	from, err := parseTimeFlag("start", start)
	if err != nil {
		return usagef(fs, "schedules backfill: %v", err)
	}
	to, err := parseTimeFlag("end", end)
	if err != nil {
		return usagef(fs, "schedules backfill: %v", err)
	}
	if err := tg.resolve(fs); err != nil {
		return err
	}
	return withClient(ctx, tg, func(c *trellis.Client) error {
		runs, err := c.BackfillSchedule(ctx, pos[0], from, to)
		if err != nil {
			return err
		}
		if asJSON {
			return writeJSON(stdout, trellis.BackfillResult{Runs: runs})
		}
		fmt.Fprintf(stdout, "%d runs for the ticks of %s in [%s, %s)\n", len(runs), pos[0], from.Format(time.RFC3339), to.Format(time.RFC3339))
		for _, r := range runs {
			fmt.Fprintf(stdout, "%s\t%s\n", r.ID, r.Status)
		}
		return nil
	})
}

func printSchedule(w io.Writer, sc *trellis.Schedule) error {
	tw := newTable(w)
	row := func(k, v string) { fmt.Fprintf(tw, "%s\t%s\n", k, v) }
	row("Schedule:", sc.Name)
	row("Namespace:", sc.Namespace)
	row("Workflow:", sc.Spec.Workflow)
	row("Queue:", sc.Spec.Queue)
	row("Cron:", sc.Spec.Cron+" ("+sc.Spec.TimeZone+")")
	row("Overlap:", string(sc.Spec.Overlap))
	row("Catch-up window:", sc.Spec.CatchupWindow.String())
	row("Paused:", fmt.Sprint(sc.Paused))
	if len(sc.Spec.Input) > 0 {
		row("Input:", string(sc.Spec.Input))
	}
	if sc.NextFireAt != nil {
		row("Next tick:", sc.NextFireAt.In(time.UTC).Format(time.RFC3339))
	}
	if sc.LastRunID != "" {
		row("Last run:", sc.LastRunID)
	}
	if sc.BufferedAt != nil {
		row("Buffered tick:", sc.BufferedAt.Format(time.RFC3339))
	}
	return tw.Flush()
}

func printScheduleTable(w io.Writer, list []*trellis.Schedule) error {
	if len(list) == 0 {
		fmt.Fprintln(w, "no schedules")
		return nil
	}
	tw := newTable(w)
	fmt.Fprintln(tw, "NAME\tWORKFLOW\tCRON\tZONE\tOVERLAP\tPAUSED\tNEXT TICK\tLAST RUN")
	for _, sc := range list {
		next := "-"
		if sc.NextFireAt != nil {
			next = sc.NextFireAt.UTC().Format(time.RFC3339)
		}
		last := sc.LastRunID
		if last == "" {
			last = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%v\t%s\t%s\n", sc.Name, sc.Spec.Workflow, sc.Spec.Cron, sc.Spec.TimeZone,
			sc.Spec.Overlap, sc.Paused, next, last)
	}
	return tw.Flush()
}
