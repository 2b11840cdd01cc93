package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/trellis-dev/trellis"
)

const namespacesUsage = `Usage: trellis namespaces <subcommand> [arguments] (--store URL | --server URL --token T)

Subcommands:
  create    create a namespace's record: NAME [--retention D] [--default-queue Q] [--payload-limit BYTES]
  list      list the namespaces with a record
  get       show a namespace: NAME
  update    change a namespace: NAME [--retention D] [--default-queue Q] [--payload-limit BYTES]

A namespace without a record works with the defaults (runs kept 30 days, default
queue "default", no payload limit); a record changes them and lets its queues be
configured (see "trellis queues"). Changes need the admin role through a server.
`

const queuesUsage = `Usage: trellis queues <subcommand> [arguments] (--store URL | --server URL --token T) [--namespace NS]

Subcommands:
  create    create a queue's record: NAME [limits] [--paused]
  list      list the namespace's queues with a record
  get       show a queue: NAME
  update    change a queue's limits: NAME [limits]
  pause     pause a queue: its runs wait, the running ones finish
  resume    resume a paused queue

Limits (each must be positive; an absent flag leaves a limit as it is):
  --concurrency-limit N  runs of the queue running at once, across every worker
  --key-limit N          runs of one concurrency key running at once
  --rate R --burst N     runs started per second, in bursts of up to N
  --payload-limit BYTES  --priority N  --max-attempts N  --initial-backoff D  --max-backoff D

A queue's namespace needs a record ("trellis namespaces create"; default has one
in every store). Pausing a paused
queue, or resuming one that is not paused, is an error. See docs/queues.md.
`

func runNamespaces(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	printUsage := func(w io.Writer) { fmt.Fprint(w, namespacesUsage) }
	if len(args) == 0 {
		return &usageError{msg: "namespaces: no subcommand given", cmd: "namespaces"}
	}
	switch sub, rest := args[0], args[1:]; sub {
	case "create", "update":
		return namespacesSet(ctx, sub, rest, stdout, stderr)
	case "list":
		return namespacesList(ctx, rest, stdout, stderr)
	case "get":
		return namespacesGet(ctx, rest, stdout, stderr)
	case "help", "-h", "-help", "--help":
		return &helpError{usage: printUsage}
	default:
		return &usageError{msg: fmt.Sprintf("namespaces: unknown subcommand %q", sub), cmd: "namespaces"}
	}
}

func runQueues(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	printUsage := func(w io.Writer) { fmt.Fprint(w, queuesUsage) }
	if len(args) == 0 {
		return &usageError{msg: "queues: no subcommand given", cmd: "queues"}
	}
	switch sub, rest := args[0], args[1:]; sub {
	case "create", "update":
		return queuesSet(ctx, sub, rest, stdout, stderr)
	case "list":
		return queuesList(ctx, rest, stdout, stderr)
	case "get", "pause", "resume":
		return queuesOne(ctx, sub, rest, stdout, stderr)
	case "help", "-h", "-help", "--help":
		return &helpError{usage: printUsage}
	default:
		return &usageError{msg: fmt.Sprintf("queues: unknown subcommand %q", sub), cmd: "queues"}
	}
}

// setFlags records which flags a command line set (a limit not given is left
// as it is).
func setFlags(fs *flag.FlagSet) map[string]bool {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	return set
}

// oneName parses a command's flags and its one NAME argument.
func oneName(fs *flag.FlagSet, args []string, tg *target) (string, error) {
	pos, err := parseArgs(fs, args)
	switch {
	case err != nil:
		return "", err
	case len(pos) == 0:
		return "", usagef(fs, "%s: NAME is required", fs.Name())
	case len(pos) > 1:
		return "", usagef(fs, "%s: unexpected argument %q", fs.Name(), pos[1])
	}
	if err := tg.resolve(fs); err != nil {
		return "", err
	}
	return pos[0], nil
}

func namespacesSet(ctx context.Context, sub string, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("namespaces "+sub, "namespaces "+sub+" NAME [flags]",
		map[string]string{"create": "Create a namespace's record.", "update": "Change a namespace's record."}[sub], stderr)
	var (
		tg           target
		asJSON       bool
		retention    time.Duration
		defaultQueue string
		payloadLimit int
	)
	connFlags(fs, &tg)
	fs.BoolVar(&asJSON, "json", false, "print the namespace as JSON")
	fs.DurationVar(&retention, "retention", 0, "how long finished runs are kept, e.g. 720h (default 720h)")
	fs.StringVar(&defaultQueue, "default-queue", "", "the `queue` of runs started without one (default \"default\")")
	fs.IntVar(&payloadLimit, "payload-limit", 0, "the largest run input, in `bytes` (default none)")
	name, err := oneName(fs, args, &tg)
	if err != nil {
		return err
	}
	set := setFlags(fs)
	return withClient(ctx, tg, func(c *trellis.Client) error {
		var ns *trellis.Namespace
		var err error
		if sub == "create" {
			o := trellis.NamespaceOptions{Name: name, Retention: trellis.Duration(retention),
				DefaultQueue: defaultQueue, PayloadLimit: payloadLimit}
			if set["retention"] && retention <= 0 {
				return usagef(fs, "namespaces create %s: --retention must be positive, not %v", name, retention)
			}
			if set["payload-limit"] && payloadLimit <= 0 {
				return usagef(fs, "namespaces create %s: --payload-limit must be positive, not %d", name, payloadLimit)
			}
			ns, err = c.CreateNamespace(ctx, o)
		} else {
			u := trellis.NamespaceUpdate{Name: name}
			if set["retention"] {
				d := trellis.Duration(retention)
				u.Retention = &d
			}
			if set["default-queue"] {
				u.DefaultQueue = &defaultQueue
			}
			if set["payload-limit"] {
				u.PayloadLimit = &payloadLimit
			}
			ns, err = c.UpdateNamespace(ctx, u)
		}
		if err != nil {
			return err
		}
		return printNamespaces(stdout, asJSON, false, ns)
	})
}

func namespacesList(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("namespaces list", "namespaces list [flags]", "List the namespaces with a record, by name.", stderr)
	var tg target
	var asJSON bool
	connFlags(fs, &tg)
	fs.BoolVar(&asJSON, "json", false, "print the namespaces as JSON")
	pos, err := parseArgs(fs, args)
	switch {
	case err != nil:
		return err
	case len(pos) > 0:
		return usagef(fs, "namespaces list: unexpected argument %q", pos[0])
	}
	if err := tg.resolve(fs); err != nil {
		return err
	}
	return withClient(ctx, tg, func(c *trellis.Client) error {
		list, err := c.ListNamespaces(ctx)
		if err != nil {
			return err
		}
		return printNamespaces(stdout, asJSON, true, list...)
	})
}

func namespacesGet(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("namespaces get", "namespaces get NAME [flags]", "Show a namespace's record.", stderr)
	var tg target
	var asJSON bool
	connFlags(fs, &tg)
	fs.BoolVar(&asJSON, "json", false, "print the namespace as JSON")
	name, err := oneName(fs, args, &tg)
	if err != nil {
		return err
	}
	return withClient(ctx, tg, func(c *trellis.Client) error {
		ns, err := c.GetNamespace(ctx, name)
		if err != nil {
			return err
		}
		return printNamespaces(stdout, asJSON, false, ns)
	})
}

func printNamespaces(w io.Writer, asJSON, list bool, nss ...*trellis.Namespace) error {
	if asJSON {
		if list {
			return writeJSON(w, struct {
				Namespaces []*trellis.Namespace `json:"namespaces"`
			}{nss})
		}
		return writeJSON(w, nss[0])
	}
	if len(nss) == 0 {
		fmt.Fprintln(w, "no namespaces with a record")
		return nil
	}
	tw := newTable(w)
	fmt.Fprintln(tw, "NAME\tRETENTION\tDEFAULT QUEUE\tPAYLOAD LIMIT\tUPDATED")
	for _, n := range nss {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", n.Name, time.Duration(n.Retention), n.DefaultQueue,
			limitText(n.PayloadLimit), tableTime(n.UpdatedAt))
	}
	return tw.Flush()
}

func limitText(n int) string {
	if n <= 0 {
		return "-"
	}
	return strconv.Itoa(n)
}

func queuesSet(ctx context.Context, sub string, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("queues "+sub, "queues "+sub+" NAME [flags]",
		map[string]string{"create": "Create a queue's record in the namespace (which needs one).",
			"update": "Change the limits a queue's record sets."}[sub], stderr)
	var (
		tg                                  target
		asJSON, paused                      bool
		conc, keyLimit, burst, payload, pri int
		maxAttempts                         int
		rate                                float64
		initial, maxBackoff                 time.Duration
	)
	targetFlags(fs, &tg)
	fs.BoolVar(&asJSON, "json", false, "print the queue as JSON")
	if sub == "create" {
		fs.BoolVar(&paused, "paused", false, "create the queue paused")
	}
	fs.IntVar(&conc, "concurrency-limit", 0, "runs of the queue running at once, across every worker")
	fs.IntVar(&keyLimit, "key-limit", 0, "runs with one concurrency key running at once")
	fs.Float64Var(&rate, "rate", 0, "runs started per second, at most (`N`, fractions allowed: 0.5 is one run every two seconds)")
	fs.IntVar(&burst, "burst", 0, "the largest burst of runs started at once under --rate (default 1)")
	fs.IntVar(&payload, "payload-limit", 0, "the largest run input, in `bytes`")
	fs.IntVar(&pri, "priority", 0, "the default priority of the queue's runs")
	fs.IntVar(&maxAttempts, "max-attempts", 0, "default retry policy: attempts of a step, the first included")
	fs.DurationVar(&initial, "initial-backoff", 0, "default retry policy: the first backoff")
	fs.DurationVar(&maxBackoff, "max-backoff", 0, "default retry policy: the largest backoff")
	name, err := oneName(fs, args, &tg)
	if err != nil {
		return err
	}
	set := setFlags(fs)
	var s trellis.QueueSettings
	for flagName, dst := range map[string]**int{"concurrency-limit": &s.ConcurrencyLimit, "key-limit": &s.KeyLimit,
		"burst": &s.RateBurst, "payload-limit": &s.PayloadLimit, "priority": &s.Priority} {
		if set[flagName] {
			v := map[string]int{"concurrency-limit": conc, "key-limit": keyLimit, "burst": burst,
				"payload-limit": payload, "priority": pri}[flagName]
			*dst = &v
		}
	}
	if set["rate"] {
		s.RatePerSecond = &rate
	}
	if set["max-attempts"] || set["initial-backoff"] || set["max-backoff"] {
		s.Retry = &trellis.QueueRetry{MaxAttempts: maxAttempts, InitialBackoff: trellis.Duration(initial),
			MaxBackoff: trellis.Duration(maxBackoff)}
	}
	return queueHint(tg, withClient(ctx, tg, func(c *trellis.Client) error {
		var q *trellis.Queue
		var err error
		if sub == "create" {
			q, err = c.CreateQueue(ctx, name, s)
			if err == nil && paused {
				q, err = c.PauseQueue(ctx, name)
			}
		} else {
			q, err = c.UpdateQueue(ctx, name, s)
		}
		if err != nil {
			return err
		}
		return printQueues(stdout, asJSON, false, q)
	}))
}

func queuesList(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("queues list", "queues list [flags]", "List the namespace's queues with a record, by name.", stderr)
	var tg target
	var asJSON bool
	targetFlags(fs, &tg)
	fs.BoolVar(&asJSON, "json", false, "print the queues as JSON")
	pos, err := parseArgs(fs, args)
	switch {
	case err != nil:
		return err
	case len(pos) > 0:
		return usagef(fs, "queues list: unexpected argument %q", pos[0])
	}
	if err := tg.resolve(fs); err != nil {
		return err
	}
	return queueHint(tg, withClient(ctx, tg, func(c *trellis.Client) error {
		list, err := c.ListQueues(ctx)
		if err != nil {
			return err
		}
		return printQueues(stdout, asJSON, true, list...)
	}))
}

func queuesOne(ctx context.Context, sub string, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("queues "+sub, "queues "+sub+" NAME [flags]", map[string]string{
		"get":    "Show a queue's record.",
		"pause":  "Pause a queue: it still accepts runs; nobody claims them until it is resumed; the runs already running finish.",
		"resume": "Resume a paused queue.",
	}[sub], stderr)
	var tg target
	var asJSON bool
	targetFlags(fs, &tg)
	fs.BoolVar(&asJSON, "json", false, "print the queue as JSON")
	name, err := oneName(fs, args, &tg)
	if err != nil {
		return err
	}
	return queueHint(tg, withClient(ctx, tg, func(c *trellis.Client) error {
		var q *trellis.Queue
		var err error
		switch sub {
		case "get":
			q, err = c.GetQueue(ctx, name)
		case "pause":
			q, err = c.PauseQueue(ctx, name)
		default:
			q, err = c.ResumeQueue(ctx, name)
		}
		if err != nil {
			return err
		}
		return printQueues(stdout, asJSON, false, q)
	}))
}

func printQueues(w io.Writer, asJSON, list bool, qs ...*trellis.Queue) error {
	if asJSON {
		if list {
			return writeJSON(w, struct {
				Queues []*trellis.Queue `json:"queues"`
			}{qs})
		}
		return writeJSON(w, qs[0])
	}
	if len(qs) == 0 {
		fmt.Fprintln(w, "no queues with a record")
		return nil
	}
	tw := newTable(w)
	fmt.Fprintln(tw, "NAME\tPAUSED\tCONCURRENCY\tKEY LIMIT\tRATE\tPAYLOAD LIMIT\tPRIORITY")
	for _, q := range qs {
		paused, rate := "no", "-"
		if q.Paused {
			paused = "yes"
		}
		if q.RatePerSecond > 0 {
			rate = fmt.Sprintf("%g/s burst %d", q.RatePerSecond, q.RateBurst)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\n", q.Name, paused, limitText(q.ConcurrencyLimit),
			limitText(q.KeyLimit), rate, limitText(q.PayloadLimit), q.Priority)
	}
	return tw.Flush()
}

// queueHint adds to a queue command's ErrNamespaceNotFound how to give the
// namespace a record: runs work in a namespace without one, queues need it.
func queueHint(tg target, err error) error {
	if !errors.Is(err, trellis.ErrNamespaceNotFound) {
		return err
	}
	return fmt.Errorf("%w (a namespace's queues need its record: trellis namespaces create %s)", err, tg.ns())
}
