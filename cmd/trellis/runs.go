package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/trellis-dev/trellis"
	"github.com/trellis-dev/trellis/store"
	"github.com/trellis-dev/trellis/store/storesqlite"
)

const runsUsage = `Usage: trellis runs <subcommand> [arguments] (--store URL | --server URL --token T)

Subcommands:
  start       start a run of a workflow by name (WORKFLOW --input JSON)
  list        list runs, newest first
  get         show every field of one run
  history     show a run's ops, results and failed attempts
  watch       print a run's stream live until it ends ([--after N|now] [--json])
  result      wait until a run ends and print its output (exit 8 if it failed)
  cancel      cancel a run
  resume      make a blocked run pending again, to replay with the code now deployed
  send-event  send an event to a run (--name NAME [--payload JSON])
  reset       start a finished run again from one of its steps (--to STEP)
  delete      delete a finished run and everything that belongs to it, now

<id> is a run ID, or a workflow ID (meaning its latest run).

Flags of every subcommand:
  --store URL        the store (default $TRELLIS_STORE)
  --server URL       a Trellis server instead of a store (default $TRELLIS_SERVER)
  --token T          the bearer token for --server (default $TRELLIS_TOKEN)
  --namespace NAME   the runs' namespace (default $TRELLIS_NAMESPACE, else "default")

"trellis runs <subcommand> -h" shows a subcommand's flags.
`

// allStatuses are the run states, in lifecycle order.
var allStatuses = []trellis.Status{
	trellis.StatusPending, trellis.StatusRunning, trellis.StatusWaiting, trellis.StatusBlocked,
	trellis.StatusSucceeded, trellis.StatusFailed, trellis.StatusCancelled,
}

func runRuns(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	printUsage := func(w io.Writer) { fmt.Fprint(w, runsUsage) }
	if len(args) == 0 {
		return &usageError{msg: "runs: no subcommand given", cmd: "runs"}
	}
	switch sub, rest := args[0], args[1:]; sub {
	case "start":
		return runsStart(ctx, rest, stdout, stderr)
	case "list":
		return runsList(ctx, rest, stdout, stderr)
	case "get":
		return runsGet(ctx, rest, stdout, stderr)
	case "history":
		return runsHistory(ctx, rest, stdout, stderr)
	case "watch":
		return runsWatch(ctx, rest, stdout, stderr)
	case "result":
		return runsResult(ctx, rest, stdout, stderr)
	case "cancel":
		return runsCancel(ctx, rest, stdout, stderr)
	case "resume":
		return runsResume(ctx, rest, stdout, stderr)
	case "send-event":
		return runsSendEvent(ctx, rest, stdout, stderr)
	case "reset":
		return runsReset(ctx, rest, stdout, stderr)
	case "delete":
		return runsDelete(ctx, rest, stdout, stderr)
	case "help", "-h", "-help", "--help":
		return &helpError{usage: printUsage}
	default:
		return &usageError{msg: fmt.Sprintf("runs: unknown subcommand %q", sub), cmd: "runs"}
	}
}

// listArgs are the parsed arguments of runs list.
type listArgs struct {
	target target
	opts   trellis.ListOptions
	asJSON bool
}

func parseListArgs(args []string, stderr io.Writer) (*listArgs, *flag.FlagSet, error) {
	fs := newFlagSet("runs list", "runs list --store URL|--server URL [flags]", "List runs, newest first, one page at a time.", stderr)
	var la listArgs
	targetFlags(fs, &la.target)
	status := fs.String("status", "", "only runs in these states, comma-separated: "+statusNames())
	fs.StringVar(&la.opts.Workflow, "workflow", "", "only runs of this workflow `name`")
	fs.StringVar(&la.opts.WorkflowID, "workflow-id", "", "only runs that had this workflow `ID` (a reset's runs share it)")
	fs.IntVar(&la.opts.Limit, "limit", 0, "page size: default 100, at most 1000")
	fs.StringVar(&la.opts.Cursor, "cursor", "", "continue from the `cursor` a previous page printed")
	fs.BoolVar(&la.asJSON, "json", false, "print the page as JSON")
	pos, err := parseArgs(fs, args)
	switch {
	case err != nil:
		return nil, fs, err
	case len(pos) > 0:
		return nil, fs, usagef(fs, "runs list: unexpected argument %q", pos[0])
	case la.opts.Limit < 0 || la.opts.Limit > 1000:
		return nil, fs, usagef(fs, "runs list: --limit %d: must be between 1 and 1000", la.opts.Limit)
	}
	if la.opts.Statuses, err = parseStatuses(*status); err != nil {
		return nil, fs, usagef(fs, "runs list: %v", err)
	}
	return &la, fs, la.target.resolve(fs)
}

func runsList(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	la, fs, err := parseListArgs(args, stderr)
	if err != nil {
		return err
	}
	return withClient(ctx, la.target, func(c *trellis.Client) error {
		page, err := c.List(ctx, la.opts)
		if errors.Is(err, store.ErrInvalidParams) {
			return usagef(fs, "runs list: %v", err) // e.g. a malformed --cursor
		}
		if err != nil {
			return err
		}
		if la.asJSON {
			return writeJSON(stdout, page)
		}
		return printRunTable(stdout, stderr, page)
	})
}

// parseStatuses parses a comma-separated list of run states.
func parseStatuses(s string) ([]trellis.Status, error) {
	if s == "" {
		return nil, nil
	}
	var out []trellis.Status
	for part := range strings.SplitSeq(s, ",") {
		st := trellis.Status(strings.TrimSpace(part))
		if !st.Valid() {
			return nil, fmt.Errorf("invalid --status %q: want one of %s", part, statusNames())
		}
		out = append(out, st)
	}
	return out, nil
}

func statusNames() string {
	names := make([]string, len(allStatuses))
	for i, s := range allStatuses {
		names[i] = string(s)
	}
	return strings.Join(names, ", ")
}

func runsGet(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var asJSON bool
	return withRun(ctx, "get", "Show every field of a run.", args, stderr, func(fs *flag.FlagSet) {
		fs.BoolVar(&asJSON, "json", false, "print the run as JSON")
	}, func(c *trellis.Client, ref string) error {
		run, err := c.Get(ctx, ref)
		if err != nil {
			return refError(ref, err)
		}
		if asJSON {
			return writeJSON(stdout, run)
		}
		return printRun(stdout, run)
	})
}

func runsHistory(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var asJSON bool
	return withRun(ctx, "history", "Show a run's ops in order, with each failed attempt.", args, stderr, func(fs *flag.FlagSet) {
		fs.BoolVar(&asJSON, "json", false, "print the run and its ops in the "+trellis.HistoryFormat+" format (docs/history-format.md)")
	}, func(c *trellis.Client, ref string) error {
		if asJSON {
			h, err := c.ExportHistory(ctx, ref)
			if err != nil {
				return refError(ref, err)
			}
			return writeJSON(stdout, h)
		}
		run, err := c.Get(ctx, ref)
		if err != nil {
			return refError(ref, err)
		}
		ops, err := c.History(ctx, run.ID)
		if err != nil {
			return refError(ref, err)
		}
		return printHistory(stdout, run, ops)
	})
}

func runsCancel(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	about := "Cancel a run. A run that has not started ends cancelled at once; a running\nor waiting run stops at its next op and then ends cancelled."
	return withRun(ctx, "cancel", about, args, stderr, nil, func(c *trellis.Client, ref string) error {
		if err := c.Cancel(ctx, ref); err != nil {
			return refError(ref, err)
		}
		run, err := c.Get(ctx, ref)
		if err != nil {
			return refError(ref, err)
		}
		if run.Status == trellis.StatusCancelled {
			fmt.Fprintf(stdout, "run %s cancelled\n", run.ID)
			return nil
		}
		fmt.Fprintf(stdout, "run %s: cancellation requested; it is %s and ends cancelled at its next op\n", run.ID, run.Status)
		return nil
	})
}

func runsDelete(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	about := "Delete a finished run now, with its history, attempts, stored values, events,\napprovals and idempotency keys. A run that has not finished is refused: cancel\nit first. (Finished runs are also deleted once their namespace's retention\nperiod has passed.) Through a server it needs the admin role."
	return withRun(ctx, "delete", about, args, stderr, nil, func(c *trellis.Client, ref string) error {
		run, err := c.Get(ctx, ref)
		if err != nil {
			return refError(ref, err)
		}
		if err := c.Delete(ctx, run.ID); err != nil {
			if errors.Is(err, trellis.ErrRunActive) {
				return fmt.Errorf("run %q is %s: %w; cancel it first", ref, run.Status, trellis.ErrRunActive)
			}
			return refError(ref, err)
		}
		fmt.Fprintf(stdout, "run %s deleted\n", run.ID)
		return nil
	})
}

func runsResume(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	about := "Make a blocked run pending again, so a worker replays it with the code now deployed."
	return withRun(ctx, "resume", about, args, stderr, nil, func(c *trellis.Client, ref string) error {
		if err := c.Resume(ctx, ref); err != nil {
			return refError(ref, err)
		}
		fmt.Fprintf(stdout, "run %s resumed: pending until a worker claims it\n", ref)
		return nil
	})
}

// withRun parses "runs <sub> <id> --store URL|--server URL [flags]" (flags added by addFlags,
// which may be nil) and calls fn with a client on the store and the id.
func withRun(ctx context.Context, sub, about string, args []string, stderr io.Writer,
	addFlags func(*flag.FlagSet), fn func(c *trellis.Client, ref string) error) error {
	fs := newFlagSet("runs "+sub, "runs "+sub+" <id> --store URL|--server URL [flags]", about, stderr)
	var tg target
	targetFlags(fs, &tg)
	if addFlags != nil {
		addFlags(fs)
	}
	pos, err := parseArgs(fs, args)
	switch {
	case err != nil:
		return err
	case len(pos) == 0:
		return usagef(fs, "runs %s: missing run id", sub)
	case len(pos) > 1:
		return usagef(fs, "runs %s: want one run id, got %d arguments: %s", sub, len(pos), strings.Join(pos, " "))
	}
	if err := tg.resolve(fs); err != nil {
		return err
	}
	return withClient(ctx, tg, func(c *trellis.Client) error { return fn(c, pos[0]) })
}

// Environment variables that stand in for flags not given.
const (
	envStore     = "TRELLIS_STORE"     // --store
	envNamespace = "TRELLIS_NAMESPACE" // --namespace
	envServer    = "TRELLIS_SERVER"    // --server
	envToken     = "TRELLIS_TOKEN"     // --token
)

func storeFlag(fs *flag.FlagSet, p *string) {
	fs.StringVar(p, "store", "", "store `URL`, e.g. sqlite:///abs/path/trellis.db (required; default $"+envStore+")")
}

// target is what a command works on: a store, or a server (with a token), and
// a namespace.
type target struct{ store, server, token, namespace string }

// targetFlags adds --store, --server, --token and --namespace.
func targetFlags(fs *flag.FlagSet, t *target) {
	connFlags(fs, t)
	fs.StringVar(&t.namespace, "namespace", "", "the `namespace` of the runs (default $"+envNamespace+", else \"default\")")
}

// connFlags adds --store, --server and --token: the flags of a command that
// works on no one namespace (trellis namespaces).
func connFlags(fs *flag.FlagSet, t *target) {
	storeFlag(fs, &t.store)
	fs.StringVar(&t.server, "server", "", "a Trellis server's `URL`, e.g. http://127.0.0.1:7070, instead of --store (default $"+envServer+")")
	fs.StringVar(&t.token, "token", "", "the bearer `token` for --server (default $"+envToken+")")
}

// ns is the namespace the target's client works in: --namespace, else
// $TRELLIS_NAMESPACE (after resolve), else the default, as trellis.Config has it.
func (t target) ns() string {
	if t.namespace == "" {
		return store.DefaultNamespace
	}
	return t.namespace
}

// resolve fills what the flags left empty from the environment and checks that
// one store or one server is named: a flag wins over the environment, and
// --store with --server is a usage error.
func (t *target) resolve(fs *flag.FlagSet) error {
	if t.namespace == "" {
		t.namespace = os.Getenv(envNamespace)
	}
	if t.token == "" {
		t.token = os.Getenv(envToken)
	}
	switch {
	case t.store != "" && t.server != "":
		return usagef(fs, "%s: --store and --server exclude each other", fs.Name())
	case t.store == "" && t.server == "":
		t.store, t.server = os.Getenv(envStore), os.Getenv(envServer)
		if t.store != "" && t.server != "" {
			return usagef(fs, "%s: both %s and %s are set; pass --store or --server", fs.Name(), envStore, envServer)
		}
	}
	if t.server != "" {
		return nil
	}
	return requireStore(fs, &t.store)
}

// withClient opens an inspection-only client (no worker) on an existing store,
// or a client on a server, calls fn, and closes the client.
func withClient(ctx context.Context, t target, fn func(*trellis.Client) error) error {
	if t.server != "" {
		c, err := trellis.Open(ctx, trellis.Config{Server: t.server, Token: t.token, Namespace: t.namespace})
		if err != nil {
			return err
		}
		return errors.Join(fn(c), c.Close())
	}
	if err := checkStoreExists(t.store); err != nil {
		return err
	}
	s, err := trellis.OpenExistingStore(ctx, t.store, time.Now) // never creates or migrates
	if err != nil {
		return err
	}
	c, err := trellis.Open(ctx, trellis.Config{Backend: s, Namespace: t.namespace, Worker: trellis.WorkerOptions{Disabled: true}})
	if err != nil {
		return errors.Join(err, s.Close())
	}
	err = fn(c)
	return errors.Join(err, c.Close(), s.Close())
}

// checkStoreExists fails for a SQLite store whose file is missing: opening it would
// create an empty database, and a typo in the path would then list no runs at all.
func checkStoreExists(url string) error {
	if !strings.HasPrefix(url, "sqlite:") {
		return nil // other schemes report their own errors at open
	}
	cfg, err := storesqlite.ParseURL(url)
	if err != nil {
		return err
	}
	if _, err := os.Stat(cfg.Path); errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("%w at %s (trellis migrate --store %s creates one)", errNoStoreFile, cfg.Path, url)
	}
	return nil
}

// refError names the run in err and drops the store's wrapping of the errors a user
// acts on, e.g. `run "x": run not found`.
func refError(ref string, err error) error {
	for _, sentinel := range []error{trellis.ErrRunNotFound, trellis.ErrRunFinished, trellis.ErrRunNotBlocked} {
		if errors.Is(err, sentinel) {
			return fmt.Errorf("run %q: %w", ref, sentinel)
		}
	}
	return fmt.Errorf("run %q: %w", ref, err)
}
