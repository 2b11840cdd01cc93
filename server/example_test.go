package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	"github.com/trellis-dev/trellis"
	"github.com/trellis-dev/trellis/server"
)

// A server in front of a store, a Go worker that runs its workflow through it
// with a token and no database credentials, and a client on it whose errors are
// the SDK's own (errors.Is holds across the wire).
func ExampleNew() {
	dir, _ := os.MkdirTemp("", "trellis-example")
	defer os.RemoveAll(dir)
	ctx := context.Background()

	srv, err := server.New(ctx, server.Config{
		Store:  "sqlite://" + filepath.Join(dir, "trellis.db"),
		Listen: "127.0.0.1:0", // `trellis server` listens on 127.0.0.1:7070
	})
	if err != nil {
		panic(err)
	}
	token, err := srv.BootstrapAdmin(ctx) // the first admin token (admin:*)
	if err != nil {
		panic(err)
	}
	if err := srv.Start(); err != nil {
		panic(err)
	}
	defer srv.Shutdown(ctx)
	cfg := trellis.Config{Server: srv.URL(), Token: token}

	// The worker: the same workflow code as embedded, only its Config differs
	// (and its program imports _ "github.com/trellis-dev/trellis/store/storeremote",
	// the remote worker's transport).
	greet := trellis.NewWorkflow("greet", func(wc *trellis.Context, name string) (string, error) {
		return trellis.Step(wc, "compose", func(ctx context.Context) (string, error) { return "hello, " + name, nil })
	})
	w, err := trellis.NewWorker(ctx, cfg)
	if err != nil {
		panic(err)
	}
	if err := w.Register(ctx, greet); err != nil {
		panic(err)
	}
	wctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()
	defer func() { stop(); <-done }()

	// A client of the API.
	c, err := trellis.Open(ctx, cfg)
	if err != nil {
		panic(err)
	}
	defer c.Close()
	h, err := trellis.Start(ctx, c, greet, "Ada", trellis.StartOptions{ID: "greet-ada"})
	if err != nil {
		panic(err)
	}
	fmt.Println(h.Result(ctx))
	_, err = trellis.Start(ctx, c, greet, "Ada", trellis.StartOptions{ID: "greet-ada", Reuse: trellis.ReuseReject})
	fmt.Println(errors.Is(err, trellis.ErrRunExists))
	// Output:
	// hello, Ada <nil>
	// true
}

// Every mutating request takes an Idempotency-Key header: a retry with the same
// key gets the first answer again and executes nothing twice.
func ExampleNew_idempotencyKey() {
	dir, _ := os.MkdirTemp("", "trellis-example")
	defer os.RemoveAll(dir)
	ctx := context.Background()
	srv, err := server.New(ctx, server.Config{Store: "sqlite://" + filepath.Join(dir, "trellis.db"), Listen: "127.0.0.1:0"})
	if err != nil {
		panic(err)
	}
	token, err := srv.BootstrapAdmin(ctx)
	if err != nil {
		panic(err)
	}
	if err := srv.Start(); err != nil {
		panic(err)
	}
	defer srv.Shutdown(ctx)

	start := func() (int, string) { // a start by name; no worker serves "report" yet
		req, _ := http.NewRequest("POST", srv.URL()+"/v1/namespaces/default/runs",
			strings.NewReader(`{"workflow":"report","input":{"month":"2026-10"}}`))
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", "report-2026-10-attempt")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			panic(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		var run struct {
			ID string `json:"id"`
		}
		json.Unmarshal(body, &run)
		return resp.StatusCode, run.ID
	}
	status1, id1 := start()
	status2, id2 := start() // the retry of a request whose answer was lost
	fmt.Println(status1, status2, id1 == id2)

	c, err := trellis.Open(ctx, trellis.Config{Server: srv.URL(), Token: token})
	if err != nil {
		panic(err)
	}
	defer c.Close()
	page, err := c.List(ctx, trellis.ListOptions{Workflow: "report"})
	if err != nil {
		panic(err)
	}
	fmt.Println(len(page.Runs), "run")
	// Output:
	// 201 201 true
	// 1 run
}
