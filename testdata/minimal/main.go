// Command minimal is the smallest embedded Trellis program: it imports package
// trellis and nothing else of Trellis. TestMinimalProgramLinksNoDriverItDoesNotUse
// lists what it links and runs it:
//
//	minimal run STORE-URL   runs a workflow of one step in the store, prints its result
//	minimal worker SERVER   starts a remote worker, prints NewWorker's error
//	minimal trace           prints TracerFromEnv's error (the OTEL_* variables set)
package main

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/trellis-dev/trellis"
)

func main() {
	if err := run(context.Background(), os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return fmt.Errorf("usage: minimal run STORE-URL | worker SERVER | trace")
	}
	switch {
	case args[0] == "run" && len(args) == 2:
		c, err := trellis.Open(ctx, trellis.Config{Store: args[1]})
		if err != nil {
			return err
		}
		defer c.Close()
		hello := trellis.NewWorkflow("hello", func(wc *trellis.Context, name string) (string, error) {
			return trellis.Step(wc, "greet", func(context.Context) (string, error) {
				return "hello, " + strings.ToUpper(name), nil
			})
		})
		if err := c.Register(ctx, hello); err != nil {
			return err
		}
		h, err := trellis.Start(ctx, c, hello, "trellis")
		if err != nil {
			return err
		}
		out, err := h.Result(ctx)
		if err != nil {
			return err
		}
		fmt.Println(out)
		return nil
	case args[0] == "worker" && len(args) == 2:
		w, err := trellis.NewWorker(ctx, trellis.Config{Server: args[1]})
		if err == nil {
			w.Client().Close()
			return fmt.Errorf("NewWorker(%s): no error", args[1])
		}
		return err
	case args[0] == "trace" && len(args) == 1:
		_, shutdown, err := trellis.TracerFromEnv(ctx)
		if err == nil {
			shutdown(ctx)
			return fmt.Errorf("TracerFromEnv: no error")
		}
		return err
	}
	return fmt.Errorf("usage: minimal run STORE-URL | worker SERVER | trace")
}
