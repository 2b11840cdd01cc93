package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// lockedBuffer is a buffer written by one goroutine and read by another.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// trellis dev serves the web UI, says where, and keeps it up after the demo
// until interrupted. Its /metrics counts the demo's runs and steps.
func TestDevServesUI(t *testing.T) {
	t.Parallel()
	url := storeURL(t)
	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	var out, errOut lockedBuffer
	done := make(chan error, 1)
	go func() { done <- runDev(ctx, []string{"--store", url, "--ui", "127.0.0.1:0"}, &out, &errOut) }()
	deadline := time.Now().Add(time.Minute)
	for !strings.Contains(out.String(), "press Ctrl-C to stop") {
		select {
		case err := <-done:
			t.Fatalf("dev ended: %v\n%s%s", err, out.String(), errOut.String())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("dev did not finish its demo:\n%s", out.String())
		}
	}
	m := regexp.MustCompile(`trellis dev: web UI at (http://127\.0\.0\.1:\d+/) \(no sign-in`).FindStringSubmatch(out.String())
	if m == nil {
		t.Fatalf("dev did not say where the UI is:\n%s", out.String())
	}
	res, err := http.Get(m[1]) // follows the redirect to the runs page
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || !strings.Contains(string(body), "charge-order") || !strings.Contains(string(body), "sync-inventory") {
		t.Fatalf("UI at %s: %d %.500s", m[1], res.StatusCode, body)
	}
	res, err = http.Get(m[1] + "metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(res.Body)
	res.Body.Close()
	for _, want := range []string{
		`trellis_runs_ended_total{status="failed",workflow="sync-inventory"} 1`,
		`trellis_runs_ended_total{status="succeeded",workflow="charge-order"} 1`,
		`trellis_step_attempts_total{outcome="error",workflow="charge-order"} 1`,
	} {
		if res.StatusCode != 200 || !strings.Contains(string(body), want) {
			t.Errorf("metrics (%d) lack %s", res.StatusCode, want)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("dev after Ctrl-C: %v", err)
	}
}
