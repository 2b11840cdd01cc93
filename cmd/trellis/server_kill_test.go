package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/trellis-dev/trellis"
	"github.com/trellis-dev/trellis/internal/pgtest"
	"github.com/trellis-dev/trellis/internal/testport"
	"github.com/trellis-dev/trellis/store"
)

// A server SIGKILLed while clients are starting runs, then restarted on the same
// store, has lost no start it acknowledged with a 201: each is in the store as
// answered, and the restarted server serves it. On SQLite (fsync) and Postgres.
func TestServerKilledMidLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test skipped in -short mode")
	}
	for name, url := range map[string]func(t *testing.T) string{
		"sqlite":   storeURL,
		"postgres": func(t *testing.T) string { return pgtest.SchemaURL(t) },
	} {
		t.Run(name, func(t *testing.T) { serverKilledMidLoad(t, url(t)) })
	}
}

func serverKilledMidLoad(t *testing.T, url string) {
	trellisCmd(t, "migrate", "--store", url).ok(t)
	token := strings.TrimSpace(trellisCmd(t, "tokens", "create", "--name", "load", "--grant", "producer:default",
		"--grant", "reader:default", "--store", url).ok(t).stdout)
	addr := testport.Addr(t)
	base := "http://" + addr

	srv := startServerProcess(t, url, addr)
	load := startLoad(t, base, token, 16)
	for round := range 3 {
		load.waitAcks(t, 100*(round+1)) // starts are in flight when the kill comes
		srv.kill(t)
		srv = startServerProcess(t, url, addr)
	}
	load.waitAcks(t, load.count()+100) // the restarted server takes starts again
	acked := load.stop()
	srv.kill(t)
	if load.failures == 0 {
		t.Log("no request failed across the kills (unexpected but not wrong)")
	}

	st, err := trellis.OpenExistingStore(ctxT(t), url, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for wfID, runID := range acked {
		r, err := st.RunGet(ctxT(t), &store.RunGetParams{Namespace: "default", Ref: runID})
		if err != nil || r.WorkflowID != wfID {
			t.Fatalf("acknowledged start %s (run %s) lost: %+v %v", wfID, runID, r, err)
		}
	}
	// The restarted server serves what the killed one acknowledged.
	srv = startServerProcess(t, url, addr)
	defer srv.kill(t)
	c, err := trellis.Open(ctxT(t), trellis.Config{Server: base, Token: token})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for wfID, runID := range acked {
		if r, err := c.Get(ctxT(t), wfID); err != nil || r.ID != runID {
			t.Fatalf("through the restarted server, %s: %+v %v", wfID, r, err)
		}
		break // one through the server is enough; the store holds them all
	}
	t.Logf("%d starts acknowledged across 3 SIGKILLs, %d requests failed, none lost", len(acked), load.failures)
}

// startServerProcess starts `trellis server` on the store at url, listening on
// addr, in a process of its own (startTrellisServer).
func startServerProcess(t *testing.T, url, addr string) *trellisProc {
	t.Helper()
	return startTrellisServer(t, "--store", url, "--listen", addr)
}

// load is clients starting runs with distinct workflow IDs through the API,
// keeping what was acknowledged (201) and counting what failed.
type load struct {
	mu       sync.Mutex
	acked    map[string]string // workflow ID -> run ID
	failures int
	changed  chan struct{}
	cancel   context.CancelFunc
	wg       sync.WaitGroup
}

func startLoad(t *testing.T, base, token string, clients int) *load {
	ctx, cancel := context.WithCancel(context.Background())
	l := &load{acked: map[string]string{}, changed: make(chan struct{}, 1), cancel: cancel}
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: clients}, Timeout: 10 * time.Second}
	t.Cleanup(hc.CloseIdleConnections)
	for g := range clients {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				id := fmt.Sprintf("kill-%d-%d", g, i)
				runID, err := startOne(ctx, hc, base, token, id)
				l.mu.Lock()
				if err != nil {
					l.failures++
				} else {
					l.acked[id] = runID
				}
				l.mu.Unlock()
				select {
				case l.changed <- struct{}{}:
				default:
				}
				if err != nil {
					time.Sleep(10 * time.Millisecond) // the server is down: try again soon
				}
			}
		}()
	}
	return l
}

// startOne starts a run with workflow ID id and returns its run ID once the
// server answered 201.
func startOne(ctx context.Context, hc *http.Client, base, token, id string) (string, error) {
	body := fmt.Sprintf(`{"workflow":"nobody-serves","id":%q,"input":{"n":1}}`, id)
	req, err := http.NewRequestWithContext(ctx, "POST", base+"/v1/namespaces/default/runs", strings.NewReader(body))
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := hc.Do(req)
	if err != nil {
		return "", err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		return "", err
	}
	if res.StatusCode != http.StatusCreated {
		return "", fmt.Errorf("status %d: %s", res.StatusCode, bytes.TrimSpace(b))
	}
	var run trellis.Run
	if err := json.Unmarshal(b, &run); err != nil || run.ID == "" || run.WorkflowID != id {
		return "", fmt.Errorf("a 201 with a body that is not the run: %s (%v)", b, err)
	}
	return run.ID, nil
}

func (l *load) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.acked)
}

// waitAcks waits until n starts have been acknowledged in all.
func (l *load) waitAcks(t *testing.T, n int) {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for l.count() < n {
		select {
		case <-l.changed:
		case <-deadline:
			t.Fatalf("%d starts acknowledged, waiting for %d", l.count(), n)
		}
	}
}

// stop stops the clients and returns the acknowledged starts.
func (l *load) stop() map[string]string {
	l.cancel()
	l.wg.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.acked
}
