// Command trellis is the Trellis command line: a guided local demo (dev), inspection
// and control of runs (runs), store migrations (migrate) and benchmarks (bench).
//
// Every command is a function runX(ctx, args, stdout, stderr) error, so tests call it
// directly and capture its output; main only maps the error to an exit status.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
)

const mainUsage = `trellis is the command line of Trellis, durable execution for Go.

Usage:
  trellis <command> [arguments]

Commands:
  dev       run example workflows on a local SQLite store and watch them
  runs      list, inspect, cancel and resume runs, send events (list, get, history, cancel, resume, send-event)
  approvals list and decide approval requests (list, approve, reject)
  workers   list the workers that serve a namespace (list)
  migrate   create or upgrade a store's schema
  bench     benchmark a store
  help      show this help; "trellis help <command>" shows a command's flags

Store URLs look like sqlite:///abs/path/trellis.db or postgres://user@host:5432/db?schema=trellis.
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
// 0 on success or help, 1 on failure, 2 on bad usage, 130 when interrupted.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	err := dispatch(ctx, args, stdout, stderr)
	var ue *usageError
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, &ue):
		ue.report(stderr)
		return 2
	case errors.Is(err, context.Canceled) && ctx.Err() != nil:
		fmt.Fprintln(stderr, "trellis: interrupted")
		return 130
	}
	fmt.Fprintf(stderr, "trellis: %v\n", err)
	return 1
}

func dispatch(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return &usageError{msg: "no command given", usage: printMainUsage}
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
	case "migrate":
		return runMigrate(ctx, rest, stdout, stderr)
	case "bench":
		return runBenchCommand(ctx, rest, stdout)
	case "help", "-h", "-help", "--help":
		return runHelp(ctx, rest, stdout)
	default:
		return &usageError{msg: fmt.Sprintf("unknown command %q", cmd), usage: printMainUsage}
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
	// Each command prints its own usage for -h, here to stdout: it was asked for.
	return dispatch(ctx, append(args[:1:1], "-h"), stdout, stdout)
}

func printMainUsage(w io.Writer) { fmt.Fprint(w, mainUsage) }

// runBenchCommand checks that --store is given (bench, like every command that
// touches a store, requires it) and hands over to runBench.
func runBenchCommand(ctx context.Context, args []string, stdout io.Writer) error {
	if !hasFlag(args, "store") && !hasFlag(args, "h") && !hasFlag(args, "help") {
		return &usageError{msg: "bench: --store is required (e.g. --store sqlite:///abs/path/trellis.db)"}
	}
	return runBench(ctx, args, stdout)
}

// hasFlag reports whether args, which belong to another command's flag set, set
// the flag name (as -name, --name, -name=v or --name=v) before any "--".
func hasFlag(args []string, name string) bool {
	for _, a := range args {
		if a == "--" {
			return false
		}
		a = strings.TrimPrefix(strings.TrimPrefix(a, "-"), "-")
		if a == name || strings.HasPrefix(a, name+"=") {
			return true
		}
	}
	return false
}

// usageError is bad command-line usage: the command exits with status 2.
type usageError struct {
	msg string
	// usage writes the command's usage after the message; nil writes none.
	usage func(io.Writer)
	// reported: the flag package already printed the message and usage.
	reported bool
}

func (e *usageError) Error() string { return e.msg }

func (e *usageError) report(w io.Writer) {
	if e.reported {
		return
	}
	fmt.Fprintf(w, "trellis: %s\n", e.msg)
	if e.usage != nil {
		fmt.Fprintln(w)
		e.usage(w)
	}
}

// newFlagSet returns a flag set for "trellis <synopsis>" that reports to stderr.
func newFlagSet(name, synopsis, about string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		w := fs.Output()
		fmt.Fprintf(w, "Usage: trellis %s\n\n%s\n", synopsis, about)
		if hasFlags(fs) {
			fmt.Fprintln(w, "\nFlags:")
			fs.PrintDefaults()
		}
	}
	return fs
}

func hasFlags(fs *flag.FlagSet) bool {
	n := 0
	fs.VisitAll(func(*flag.Flag) { n++ })
	return n > 0
}

// usagef returns a usage error that prints fs's usage after the message.
func usagef(fs *flag.FlagSet, format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...), usage: func(w io.Writer) {
		fs.SetOutput(w)
		fs.Usage()
	}}
}

// parseArgs parses flags placed anywhere among args and returns the positional
// arguments. Go's flag package stops at the first positional argument, but
// "runs get ID --store URL" is how people type. Everything after "--" is positional.
func parseArgs(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			return nil, &usageError{msg: err.Error(), reported: true}
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

// requireStore returns a usage error when the --store flag was not given.
func requireStore(fs *flag.FlagSet, url string) error {
	if url == "" {
		return usagef(fs, "%s: --store is required (e.g. --store sqlite:///abs/path/trellis.db)", fs.Name())
	}
	return nil
}
