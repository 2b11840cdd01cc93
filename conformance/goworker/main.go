// Command goworker is the Go SDK's worker of the conformance kit
// (conformance/kit.json, docs/conformance.md): the kit's workflows written with
// the public Go SDK, served through a Trellis server's worker protocol.
//
// It reads the kit's environment contract: TRELLIS_SERVER, TRELLIS_TOKEN,
// TRELLIS_NAMESPACE (default "default"), TRELLIS_QUEUE (the one queue it
// serves, and where it starts children), TRELLIS_WORKER_NAME and
// TRELLIS_LEASE_SECONDS. It stops gracefully on SIGTERM.
//
// CONFORMANCE_BREAK=NAME makes the workflow of that name return a wrong output,
// and CONFORMANCE_DIE_IN_SLEEP=1 makes the worker SIGKILL itself when
// conformance.sleep's step runs: the runner's own tests use them to see a
// failing case, and a worker that dies during the kit, reported.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/trellis-dev/trellis"
	_ "github.com/trellis-dev/trellis/store/storeremote" // the remote worker's transport
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "goworker:", err)
		os.Exit(1)
	}
}

func run() error {
	server, token, queue := os.Getenv("TRELLIS_SERVER"), os.Getenv("TRELLIS_TOKEN"), os.Getenv("TRELLIS_QUEUE")
	if server == "" || queue == "" {
		return errors.New("TRELLIS_SERVER and TRELLIS_QUEUE must be set")
	}
	lease := 5 * time.Second
	if s := os.Getenv("TRELLIS_LEASE_SECONDS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			return fmt.Errorf("TRELLIS_LEASE_SECONDS: %q is not a positive integer", s)
		}
		lease = time.Duration(n) * time.Second
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()

	cfg := trellis.Config{Server: server, Token: token, Namespace: os.Getenv("TRELLIS_NAMESPACE"),
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))}
	cfg.Worker.Name = os.Getenv("TRELLIS_WORKER_NAME")
	cfg.Worker.Queues = []string{queue}
	cfg.Worker.LeaseDuration = lease
	cfg.Worker.ShutdownGrace = 2 * time.Second
	w, err := trellis.NewWorker(ctx, cfg)
	if err != nil {
		return err
	}
	k := newKit(queue, os.Getenv("CONFORMANCE_BREAK"), os.Getenv("CONFORMANCE_DIE_IN_SLEEP") == "1")
	if err := w.Register(ctx, k.all()...); err != nil {
		w.Client().Close()
		return err
	}
	fmt.Fprintf(os.Stderr, "goworker %s: serving queue %q\n", cfg.Worker.Name, queue)
	return w.Run(ctx)
}
