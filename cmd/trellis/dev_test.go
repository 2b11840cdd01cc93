package main

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/trellis-dev/trellis"
)

// TestDev runs the demo twice on one store (as a newcomer who tries it again would)
// and checks what it printed and how its runs ended.
func TestDev(t *testing.T) {
	t.Parallel()
	url := storeURL(t)
	for i := range 2 {
		var out, errOut bytes.Buffer
		if err := runDev(ctxT(t), []string{"--store", url, "--ui", "off"}, &out, &errOut); err != nil {
			t.Fatalf("dev #%d: %v\n%s%s", i+1, err, out.String(), errOut.String())
		}
		dbPath := strings.TrimPrefix(url, "sqlite://")
		contains(t, "dev output", out.String(),
			"pending → running",
			`running → waiting (retry backoff: step "charge" attempt 2 at `,
			"waiting → running",
			`→ failed (error: syncing inventory: step "call-warehouse" failed after 3 attempt(s)`,
			"All 4 demo runs finished in ", "3 succeeded, 1 failed",
			dbPath,
			"go run ./cmd/trellis runs list --store "+url+"\n",
			"go run ./cmd/trellis runs history order-1001-",
		)
	}
	want := map[string]trellis.Status{
		"greet": trellis.StatusSucceeded, "charge-order": trellis.StatusSucceeded,
		"sync-inventory": trellis.StatusFailed,
	}
	runs := listRuns(t, url)
	if len(runs) != 8 {
		t.Fatalf("%d runs after two devs, want 8", len(runs))
	}
	for _, r := range runs {
		if r.Status != want[r.Workflow] {
			t.Errorf("%s run %s ended %s, want %s", r.Workflow, r.WorkflowID, r.Status, want[r.Workflow])
		}
	}
	t.Run("history of the charge", func(t *testing.T) {
		t.Parallel()
		var id string
		for _, r := range runs {
			if r.Workflow == "charge-order" {
				id = r.WorkflowID
			}
		}
		res := trellisCmd(t, "runs", "history", id, "--store", url).ok(t)
		contains(t, "history", res.stdout, "reserve-stock", "fraud-check", "uuid", "receipt",
			"  attempt 1 failed at ", "payment gateway timed out", "  attempt 2 started at ", ", succeeded in ")
	})
}

func TestDevStore(t *testing.T) {
	t.Parallel()
	u, path, err := devStore("")
	if err != nil || !strings.HasPrefix(u, "sqlite:///") || !strings.HasSuffix(path, "/trellis.db") {
		t.Errorf("default store %q %q %v", u, path, err)
	}
	u, path, err = devStore("sqlite:///a b/t.db?durability=relaxed")
	if err != nil || u != "sqlite:///a%20b/t.db?durability=relaxed" || path != "/a b/t.db" {
		t.Errorf("store %q %q %v", u, path, err)
	}
	if _, _, err := devStore("sqlite://host/t.db"); err == nil {
		t.Error("bad URL accepted")
	}
}

// devUILine is the line trellis dev prints once its web UI serves: its URL.
var devUILine = regexp.MustCompile(`web UI at (http://[^/\s]+)/`)

// The README's two commands side by side: `trellis dev` (a process of its own)
// holds port 7070 until Ctrl-C while the tests that want 7070 run. A dev in
// this process falls back to another port and still ends with 130 on Ctrl-C
// (TestInterrupted's scenario), and a second dev process falls back and works:
// its UI, API and metrics answer on its port.
func TestDevBesideDev(t *testing.T) {
	t.Parallel()
	first := startTrellis(t, devUILine, "dev", "--store", storeURL(t))
	waitFor(t, "the first dev's demo", time.Minute, func() bool { return strings.Contains(first.stdout(), "The web UI stays up") })
	conn, err := net.Dial("tcp", devUIAddr)
	if err != nil {
		t.Fatalf("nothing holds %s beside the first dev (at %s): %v", devUIAddr, first.addr, err)
	}
	conn.Close()

	// Interrupted once it said where its UI is (a fixed second was not always
	// enough on a loaded machine).
	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	var out, errOut lockedBuffer
	go func() {
		for deadline := time.Now().Add(time.Minute); ctx.Err() == nil && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			if strings.Contains(out.String(), "web UI at ") {
				break
			}
		}
		cancel()
	}()
	if code := run(ctx, []string{"dev", "--store", storeURL(t)}, &out, &errOut); code != 130 {
		t.Errorf("dev beside dev, interrupted: exit %d\n%s%s", code, out.String(), errOut.String())
	}
	contains(t, "dev beside dev", out.String(), "web UI at http://127.0.0.1:")
	if strings.Contains(out.String(), devUIAddr) {
		t.Errorf("dev beside dev claims %s:\n%s", devUIAddr, out.String())
	}

	second := startTrellis(t, devUILine, "dev", "--store", storeURL(t))
	if second.addr == devUIAddr || second.addr == first.addr {
		t.Fatalf("the second dev serves on %s, the first on %s", second.addr, first.addr)
	}
	waitFor(t, "the second dev's demo", time.Minute, func() bool { return strings.Contains(second.stdout(), "The web UI stays up") })
	contains(t, "second dev", second.stdout(), "All 4 demo runs finished", "3 succeeded, 1 failed")
	get := func(path string) (int, string) {
		resp, err := http.Get(second.base() + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode, string(body)
	}
	// In this order: /metrics counts the API request before it, which it
	// counts once the response is written (so it is waited for).
	for _, c := range []struct{ path, want string }{
		{"/", "<html"},
		{"/v1/namespaces/default/runs", `"workflow":"charge-order"`},
	} {
		if code, body := get(c.path); code != 200 || !strings.Contains(strings.ToLower(body), strings.ToLower(c.want)) {
			t.Errorf("GET %s on the second dev: %d, lacks %q:\n%.500s", c.path, code, c.want, body)
		}
	}
	waitFor(t, "the second dev's metrics to count its API request", 10*time.Second, func() bool {
		code, body := get("/metrics")
		return code == 200 && strings.Contains(body, "trellis_api_requests_total")
	})
	for _, p := range []*trellisProc{second, first} {
		p.signal(t, syscall.SIGINT)
		if code := p.wait(t, 30*time.Second); code != 0 {
			t.Errorf("dev at %s after Ctrl-C: exit %d\n%s", p.addr, code, p.errOut.String())
		}
	}
}
