package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/trellis-dev/trellis"
	"github.com/trellis-dev/trellis/internal/testport"
)

// A `trellis server` process on a SQLite file learns of what another process
// commits to the same file: a run that this test's embedded worker executes
// answers the server's result long poll and its SSE stream, although the
// server's own commits and wake-ups carry none of it (its polls read only
// after another process committed, see docs/architecture.md).
func TestServerSeesAnotherProcessOnItsSQLiteFile(t *testing.T) {
	if testing.Short() {
		t.Skip("process test skipped in -short mode")
	}
	url := storeURL(t)
	trellisCmd(t, "migrate", "--store", url).ok(t)
	token := strings.TrimSpace(trellisCmd(t, "tokens", "create", "--name", "watcher", "--grant", "reader:default",
		"--store", url).ok(t).stdout)
	addr := testport.Addr(t)
	srv := startServerProcess(t, url, addr)
	defer srv.kill(t)

	gate := make(chan struct{})
	wf := trellis.NewWorkflow("gated", func(wc *trellis.Context, n int) (int, error) {
		if err := trellis.Emit(wc, "progress", n); err != nil {
			return 0, err
		}
		return trellis.Step(wc, "wait-for-the-test", func(ctx context.Context) (int, error) {
			select {
			case <-gate:
				return n * 2, nil
			case <-ctx.Done():
				return 0, ctx.Err()
			}
		})
	})
	ctx := ctxT(t)
	c, err := trellis.Open(ctx, trellis.Config{Store: url})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Register(ctx, wf); err != nil {
		t.Fatal(err)
	}
	h, err := trellis.Start(ctx, c, wf, 21, trellis.StartOptions{ID: "elsewhere"})
	if err != nil {
		t.Fatal(err)
	}

	get := func(path string) *http.Response {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/v1/namespaces/default/runs/elsewhere"+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	type answer struct {
		code int
		body string
		at   time.Time
	}
	result := make(chan answer, 1)
	const wait = 25 * time.Second // the server answers at its end if nothing told it earlier
	go func() {
		resp := get("/result?wait=" + wait.String())
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		result <- answer{resp.StatusCode, string(b), time.Now()}
	}()
	stream := get("/stream")
	defer stream.Body.Close()
	if stream.StatusCode != http.StatusOK {
		t.Fatalf("stream: %s", stream.Status)
	}
	lines := bufio.NewScanner(stream.Body)
	next := func() string { // the next event's name
		t.Helper()
		for lines.Scan() {
			if name, ok := strings.CutPrefix(lines.Text(), "event: "); ok {
				return name
			}
		}
		t.Fatalf("the stream ended: %v", lines.Err())
		return ""
	}
	for _, want := range []string{"run.started", "progress"} {
		if got := next(); got != want {
			t.Fatalf("stream event %q, want %q", got, want)
		}
	}
	close(gate) // the run ends in this process
	ended := time.Now()
	if _, err := h.Result(ctx); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"step.completed", "run.succeeded"} {
		if got := next(); got != want {
			t.Fatalf("stream event %q, want %q", got, want)
		}
	}
	a := <-result
	if a.at.Sub(ended) > wait/2 {
		t.Fatalf("the result long poll answered %s after the run ended: at the end of its wait, not by the server's poll", a.at.Sub(ended))
	}
	var r struct {
		Status string          `json:"status"`
		Output json.RawMessage `json:"output"`
	}
	if err := json.Unmarshal([]byte(a.body), &r); a.code != http.StatusOK || err != nil || r.Status != "succeeded" || string(r.Output) != "42" {
		t.Fatalf("the server's result long poll answered %d %s (%v), want 200 and the run succeeded with 42", a.code, a.body, err)
	}
}
