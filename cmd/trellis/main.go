// Command trellis is the Trellis command line: a guided local demo (dev), starting,
// inspecting and controlling runs (runs), deciding approvals (approvals), store
// migrations (migrate), the HTTP API server (server), benchmarks (bench), the SDK
// conformance kit (conformance) and its version (version).
//
// Every command is a function runX(ctx, args, stdout, stderr) error, so tests call it
// directly and capture its output; main only maps the error to an exit status. A
// command answers -h with a helpError and bad usage with a usageError; run prints
// the first to stdout (exit 0), the second to stderr (exit 2).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	// The object store of payloads stored apart (--blobs, a store URL's
	// blobs parameter; docs/payloads.md).
	_ "github.com/trellis-dev/trellis/store/blobs/s3blobs"
)

const mainUsage = `trellis is the command line of Trellis, durable execution for Go.

Usage:
  trellis <command> [arguments]

Commands:
  dev          run example workflows on a local SQLite store and watch them
  runs         start, watch and manage runs (start, list, get, history, watch, result, cancel, resume, send-event, reset, delete)
  approvals    list and decide approval requests (list, approve, reject)
  workers      list the workers that serve a namespace (list)
  schedules    run workflows on a cron expression (create, list, get, update, pause, resume, trigger, backfill, delete)
  tokens       create, list, rotate and revoke the server's bearer tokens (create, list, rotate, revoke)
  audit        list the audit log: who changed what through a server, when, from where (list)
  namespaces   manage namespaces: retention, default queue, payload limit (create, list, get, update)
  queues       manage queues: pause, concurrency, per-key and rate limits (create, list, get, update, pause, resume)
  migrate      create or upgrade a store's schema
  server       serve the HTTP API of a store (docs/http-api.md)
  bench        benchmark a store, or a server as its client (--server)
  conformance  run the SDK conformance kit against a server and a worker command
  version      print the version of trellis and Go
  completion   print a shell completion script: trellis completion bash|zsh|fish
  help         show this help; "trellis help <command>" shows a command's flags

Store URLs look like sqlite:///abs/path/trellis.db or postgres://user@host:5432/db?schema=trellis.

Environment:
  TRELLIS_STORE      the store URL when --store is not given (not for dev: its demo
                     keeps to its own file)
  TRELLIS_SERVER     a Trellis server's URL when neither --store nor --server is given
  TRELLIS_TOKEN      the bearer token for a server when --token is not given
  TRELLIS_NAMESPACE  the namespace when --namespace is not given (default "default")
  TRELLIS_UI_KEY     trellis server: the web UI's key, 64 hex digits, the same on
                     every server behind one address (docs/ui.md)
  OTEL_*             trellis server and dev: OpenTelemetry's variables, e.g.
                     OTEL_EXPORTER_OTLP_ENDPOINT, turn tracing on (docs/observability.md)
  GOGC               trellis server: Go's GC target; unset, the server picks its own

Exit codes:
  0 ok, 1 other error, 2 usage (or a request refused as malformed), 3 not found,
  4 unauthenticated or permission denied, 5 conflict (exists, finished, active,
  decided), 6 unavailable (unreachable, 503, rate limited, storage full; retry),
  8 the run failed or was cancelled (runs watch, runs result), 130 interrupted.
  With --json an error is a problem document on stderr (docs/cli.md).

New here? Start with: go run ./cmd/trellis dev
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		<-ctx.Done()
		stop() // a second signal kills the process at once
	}()
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run runs the command named by args[0] and returns the process exit status:
// 0 on success or help, 130 when interrupted, else the status of the error's
// class (exit.go): 2 usage, 3 not found, 4 permission, 5 conflict,
// 6 unavailable, 8 a failed or cancelled run, 1 any other error. Under --json
// an error is a problem document on stderr.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	err := dispatch(ctx, args, stdout, stderr)
	var he *helpError
	switch {
	case errors.As(err, &he):
		he.usage(stdout) // asked for: to stdout
		return exitOK
	case err == nil, errors.Is(err, flag.ErrHelp):
		return exitOK
	case interrupted(ctx, err):
		err = errInterrupted
	}
	return report(err, wantsJSON(args), stderr)
}

func dispatch(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return &usageError{msg: "no command given", full: printMainUsage}
	}
	switch cmd, rest := args[0], args[1:]; cmd {
	case "dev":
		return runDev(ctx, rest, stdout, stderr)
	case "runs":
		return runRuns(ctx, rest, stdout, stderr)
	case "approvals":
		return runApprovals(ctx, rest, stdout, stderr)
	case "workers":
		return runWorkers(ctx, rest, stdout, stderr)
	case "schedules":
		return runSchedules(ctx, rest, stdout, stderr)
	case "tokens":
		return runTokens(ctx, rest, stdout, stderr)
	case "audit":
		return runAudit(ctx, rest, stdout, stderr)
	case "namespaces":
		return runNamespaces(ctx, rest, stdout, stderr)
	case "queues":
		return runQueues(ctx, rest, stdout, stderr)
	case "migrate":
		return runMigrate(ctx, rest, stdout, stderr)
	case "server":
		return runServer(ctx, rest, stdout, stderr)
	case "bench":
		return runBenchCommand(ctx, rest, stdout)
	case "conformance":
		return runConformance(ctx, rest, stdout, stderr)
	case "version", "--version":
		return runVersion(ctx, rest, stdout, stderr)
	case "completion":
		return runCompletion(ctx, rest, stdout, stderr)
	case "help", "-h", "-help", "--help":
		return runHelp(ctx, rest, stdout)
	default:
		return &usageError{msg: fmt.Sprintf("unknown command %q", cmd)}
	}
}

// runHelp prints the main usage, or with a command name that command's usage.
func runHelp(ctx context.Context, args []string, stdout io.Writer) error {
	if len(args) == 0 {
		printMainUsage(stdout)
		return nil
	}
	switch args[0] {
	case "help", "-h", "-help", "--help":
		printMainUsage(stdout)
		return nil
	}
	// Each command answers -h with a helpError, which run prints to stdout.
	return dispatch(ctx, append(args[:1:1], "-h"), stdout, stdout)
}

func printMainUsage(w io.Writer) { fmt.Fprint(w, mainUsage) }

// usageError is bad command-line usage: the command exits with status 2 after
// one line and a hint, "run 'trellis CMD -h' for usage".
type usageError struct {
	msg string
	// cmd is the command the hint names ("runs start"); "" names trellis itself.
	cmd string
	// full, when set, is written instead of the hint: the main usage, for a
	// bare "trellis".
	full func(io.Writer)
}

func (e *usageError) Error() string { return e.msg }

func (e *usageError) report(w io.Writer) {
	fmt.Fprintf(w, "trellis: %s\n", e.msg)
	if e.full != nil {
		fmt.Fprintln(w)
		e.full(w)
		return
	}
	fmt.Fprintf(w, "%s\n", e.hint())
}

// hint is the line that tells where the usage is.
func (e *usageError) hint() string {
	if e.cmd == "" {
		return "run 'trellis -h' for usage"
	}
	return fmt.Sprintf("run 'trellis %s -h' for usage", e.cmd)
}

// helpError is a request for help (-h, --help): run prints usage to stdout and
// the command exits with status 0.
type helpError struct{ usage func(io.Writer) }

func (e *helpError) Error() string { return flag.ErrHelp.Error() }
func (e *helpError) Unwrap() error { return flag.ErrHelp }

// newFlagSet returns a flag set for "trellis <synopsis>". The flag package writes
// nothing itself: parseArgs turns -h into a helpError and a bad flag into a
// usageError, which run prints (help to stdout, errors to stderr).
func newFlagSet(name, synopsis, about string, _ io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {
		w := fs.Output()
		fmt.Fprintf(w, "Usage: trellis %s\n\n%s\n", synopsis, about)
		if hasFlags(fs) {
			fmt.Fprintln(w, "\nFlags:")
			printFlags(w, fs)
		}
	}
	return fs
}

func hasFlags(fs *flag.FlagSet) bool {
	n := 0
	fs.VisitAll(func(*flag.Flag) { n++ })
	return n > 0
}

// printFlags lists fs's flags as people type them (--name), with their defaults.
func printFlags(w io.Writer, fs *flag.FlagSet) {
	fs.VisitAll(func(f *flag.Flag) {
		arg, usage := flag.UnquoteUsage(f)
		line := "  --" + f.Name
		if arg != "" {
			line += " " + arg
		}
		if def := flagDefault(f); def != "" {
			usage += " (default " + def + ")"
		}
		fmt.Fprintf(w, "%s\n    \t%s\n", line, strings.ReplaceAll(usage, "\n", "\n    \t"))
	})
}

// flagDefault is f's default as shown in usage: "" for a zero default (a zero
// duration included, whose flag usually says what zero stands for), quoted for a
// string.
func flagDefault(f *flag.Flag) string {
	switch f.DefValue {
	case "", "0", "0s", "false":
		return ""
	}
	if g, ok := f.Value.(flag.Getter); ok {
		if _, isString := g.Get().(string); isString {
			return strconv.Quote(f.DefValue)
		}
	}
	return f.DefValue
}

// usagef returns a usage error of fs's command.
func usagef(fs *flag.FlagSet, format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...), cmd: fs.Name()}
}

// usageOf returns a function that writes fs's usage.
func usageOf(fs *flag.FlagSet) func(io.Writer) {
	return func(w io.Writer) {
		fs.SetOutput(w)
		fs.Usage()
		fs.SetOutput(io.Discard)
	}
}

// parseArgs parses flags placed anywhere among args and returns the positional
// arguments. Go's flag package stops at the first positional argument, but
// "runs get ID --store URL" is how people type. Everything after "--" is positional.
func parseArgs(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, &helpError{usage: usageOf(fs)}
			}
			return nil, usagef(fs, "%s: %s", fs.Name(), dashDash.Replace(err.Error()))
		}
		rest := fs.Args()
		if n := len(args) - len(rest); n > 0 && args[n-1] == "--" {
			return append(pos, rest...), nil
		}
		if len(rest) == 0 {
			return pos, nil
		}
		pos, args = append(pos, rest[0]), rest[1:]
	}
}

// dashDash rewrites the flag package's messages to name flags as --name.
var dashDash = strings.NewReplacer("defined: -", "defined: --", "flag -", "flag --", "argument: -", "argument: --")

// requireStore takes the store URL from $TRELLIS_STORE when --store was not given,
// and returns a usage error when neither was; it names --server and
// $TRELLIS_SERVER too when fs has a --server flag.
func requireStore(fs *flag.FlagSet, url *string) error {
	if *url == "" {
		*url = os.Getenv(envStore)
	}
	if *url != "" {
		return nil
	}
	if fs.Lookup("server") != nil {
		return usagef(fs, "%s: --store or --server is required, or set %s or %s (e.g. --store sqlite:///abs/path/trellis.db, --server http://127.0.0.1:7070)",
			fs.Name(), envStore, envServer)
	}
	return usagef(fs, "%s: --store is required, or set %s (e.g. --store sqlite:///abs/path/trellis.db)", fs.Name(), envStore)
}
