package trellis_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/trellis-dev/trellis"
)

// A worker and a producer apart: the worker holds the workflow code and runs until
// its context ends; the producer starts runs by name without any workflow code.
func ExampleWorker() {
	dir, _ := os.MkdirTemp("", "trellis-example")
	defer os.RemoveAll(dir)
	url := "sqlite://" + filepath.Join(dir, "trellis.db")

	// The worker's main.
	greet := trellis.NewWorkflow("greet", func(wc *trellis.Context, name string) (string, error) {
		return "hello, " + name, nil
	})
	// PollInterval: how soon this worker sees runs that other processes start on
	// a SQLite file (default 1s; on Postgres they are pushed).
	poll := trellis.WorkerOptions{PollInterval: 20 * time.Millisecond}
	w, err := trellis.NewWorker(context.Background(), trellis.Config{Store: url, Worker: poll})
	if err != nil {
		panic(err)
	}
	if err := w.Register(context.Background(), greet); err != nil {
		panic(err)
	}
	ctx, stop := context.WithCancel(context.Background()) // in a real main: signal.NotifyContext
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()

	// A producer elsewhere: no Register, no worker.
	producer, err := trellis.Open(context.Background(), trellis.Config{Store: url,
		Worker: trellis.WorkerOptions{Disabled: true, PollInterval: 20 * time.Millisecond}})
	if err != nil {
		panic(err)
	}
	defer producer.Close()
	in, _ := json.Marshal("Ada")
	run, err := producer.StartRaw(context.Background(), "greet", in, trellis.StartOptions{ID: "greet-ada"})
	if err != nil {
		panic(err)
	}
	run, err = producer.Wait(context.Background(), run.ID)
	if err != nil {
		panic(err)
	}
	fmt.Println(run.Status, string(run.Output))

	stop() // SIGTERM: the worker stops gracefully
	fmt.Println("worker stopped:", <-done)
	// Output:
	// succeeded "hello, Ada"
	// worker stopped: <nil>
}
