package trellis_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/trellis-dev/trellis"
	"github.com/trellis-dev/trellis/server"
)

// Workflows of the remote tests, run by a worker on the server's store.
var (
	remoteEcho = trellis.NewWorkflow("remote-echo", func(wc *trellis.Context, in map[string]any) (map[string]any, error) {
		if err := wc.Set("seen", in); err != nil {
			return nil, err
		}
		return in, nil
	})
	remoteEvent = trellis.NewWorkflow("remote-event", func(wc *trellis.Context, _ any) (string, error) {
		return trellis.WaitEvent[string](wc, "go", 0)
	})
	remoteApproval = trellis.NewWorkflow("remote-approval", func(wc *trellis.Context, _ any) (string, error) {
		d, err := trellis.Approval(wc, "ship", trellis.ApprovalOptions{})
		return d.Principal, err
	})
)

// remoteEnv is a listening server on a fresh store (storeURL: SQLite, or
// Postgres with TRELLIS_TEST_STORE=postgres) with the store's tokens, a worker
// on that store, and a client on the server with the admin token.
type remoteEnv struct {
	base, token string
	worker      *trellis.Client
	client      *trellis.Client
}

func newRemoteEnv(t *testing.T, mod ...func(*server.Config)) *remoteEnv {
	t.Helper()
	st := openStore(t, storeURL(t))
	cfg := server.Config{Backend: st, Listen: "127.0.0.1:0", MaxWait: 5 * time.Second}
	for _, m := range mod {
		m(&cfg)
	}
	srv, err := server.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	token, err := srv.BootstrapAdmin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	})
	w := open(t, "", func(c *trellis.Config) { c.Store, c.Backend = "", st })
	register(t, w, remoteEcho, remoteEvent, remoteApproval)
	e := &remoteEnv{base: "http://" + srv.Addr().String(), token: token, worker: w}
	e.client = e.open(t, token)
	return e
}

// open returns a client on the server with token, closed at cleanup.
func (e *remoteEnv) open(t *testing.T, token string) *trellis.Client {
	t.Helper()
	c, err := trellis.Open(context.Background(), trellis.Config{Server: e.base, Token: token})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func TestRemoteStartGetListWait(t *testing.T) {
	e := newRemoteEnv(t)
	ctx := ctxT(t)
	run, err := e.client.StartRaw(ctx, "remote-echo", []byte(`{"n":1}`), trellis.StartOptions{ID: "order-1"})
	if err != nil {
		t.Fatal(err)
	}
	if run.WorkflowID != "order-1" || run.Workflow != "remote-echo" {
		t.Fatalf("started %+v", run)
	}
	done, err := e.client.Wait(ctx, "order-1")
	if err != nil {
		t.Fatal(err)
	}
	if done.Status != trellis.StatusSucceeded || string(done.Output) != `{"n":1}` {
		t.Fatalf("waited: status %s output %s", done.Status, done.Output)
	}
	got := must[*trellis.Run](t)(e.client.Get(ctx, run.ID))
	if got.ID != run.ID || got.Status != trellis.StatusSucceeded {
		t.Fatalf("get: %+v", got)
	}
	page := must[*trellis.RunPage](t)(e.client.List(ctx, trellis.ListOptions{Workflow: "remote-echo", Statuses: []trellis.Status{trellis.StatusSucceeded}}))
	if len(page.Runs) != 1 || page.Runs[0].ID != run.ID {
		t.Fatalf("list: %+v", page.Runs)
	}
	var seen map[string]int
	if err := e.client.Value(ctx, run.ID, "seen", &seen); err != nil || seen["n"] != 1 {
		t.Fatalf("value: %v %v", seen, err)
	}
	ops := must[[]*trellis.Op](t)(e.client.History(ctx, run.ID))
	if len(ops) == 0 {
		t.Fatal("history: no ops")
	}
}

func TestRemoteTypedStartResult(t *testing.T) {
	e := newRemoteEnv(t)
	h, err := trellis.Start(ctxT(t), e.client, remoteEcho, map[string]any{"k": "v"})
	if err != nil {
		t.Fatal(err)
	}
	if out := mustResult(t, h); out["k"] != "v" {
		t.Fatalf("result %v", out)
	}
}

func TestRemoteErrorsAcrossTheWire(t *testing.T) {
	e := newRemoteEnv(t)
	ctx := ctxT(t)
	if _, err := e.client.StartRaw(ctx, "remote-event", nil, trellis.StartOptions{ID: "dup"}); err != nil {
		t.Fatal(err)
	}
	_, err := e.client.StartRaw(ctx, "remote-event", nil, trellis.StartOptions{ID: "dup"})
	if !errors.Is(err, trellis.ErrRunExists) {
		t.Fatalf("second start: %v, want ErrRunExists", err)
	}
	var re *trellis.RemoteError
	if !errors.As(err, &re) || re.Status != 409 || re.Code != "run_exists" {
		t.Fatalf("second start: %#v, want a RemoteError 409 run_exists", err)
	}
	if _, err := e.client.Get(ctx, "no-such-run"); !errors.Is(err, trellis.ErrRunNotFound) {
		t.Fatalf("get: %v, want ErrRunNotFound", err)
	}
	if err := e.client.Value(ctx, "dup", "nothing", new(any)); !errors.Is(err, trellis.ErrKeyNotFound) {
		t.Fatalf("value: %v, want ErrKeyNotFound", err)
	}
	if _, err := e.client.GetApproval(ctx, "x"); !errors.Is(err, trellis.ErrApprovalNotFound) {
		t.Fatalf("get approval: %v, want ErrApprovalNotFound", err)
	}
	bad := e.open(t, "not-a-token")
	if _, err := bad.Get(ctx, "dup"); !errors.Is(err, trellis.ErrUnauthenticated) {
		t.Fatalf("wrong token: %v, want ErrUnauthenticated", err)
	}
}

func TestRemoteCancelEventApprove(t *testing.T) {
	e := newRemoteEnv(t)
	ctx := ctxT(t)
	must[*trellis.Run](t)(e.client.StartRaw(ctx, "remote-event", nil, trellis.StartOptions{ID: "ev"}))
	waitStatus(t, e.client, "ev", trellis.StatusWaiting)
	if err := e.client.SendEvent(ctx, "ev", "go", "now"); err != nil {
		t.Fatal(err)
	}
	if run := must[*trellis.Run](t)(e.client.Wait(ctx, "ev")); string(run.Output) != `"now"` {
		t.Fatalf("event run output %s", run.Output)
	}
	if err := e.client.SendEvent(ctx, "ev", "go", "again"); !errors.Is(err, trellis.ErrRunFinished) {
		t.Fatalf("event to a finished run: %v, want ErrRunFinished", err)
	}

	must[*trellis.Run](t)(e.client.StartRaw(ctx, "remote-event", nil, trellis.StartOptions{ID: "doomed"}))
	if err := e.client.Cancel(ctx, "doomed"); err != nil {
		t.Fatal(err)
	}
	if run := must[*trellis.Run](t)(e.client.Wait(ctx, "doomed")); run.Status != trellis.StatusCancelled {
		t.Fatalf("cancelled run: %s", run.Status)
	}

	run := must[*trellis.Run](t)(e.client.StartRaw(ctx, "remote-approval", nil, trellis.StartOptions{}))
	waitStatus(t, e.client, run.ID, trellis.StatusWaiting)
	page := must[*trellis.ApprovalList](t)(e.client.Approvals(ctx, trellis.ApprovalFilter{Run: run.ID}))
	if len(page.Approvals) != 1 {
		t.Fatalf("approvals: %+v", page.Approvals)
	}
	a, err := e.client.Approve(ctx, page.Approvals[0].ID, "ignored", "ok")
	if err != nil {
		t.Fatal(err)
	}
	if a.Status != trellis.ApprovalApproved || a.Principal == "ignored" {
		t.Fatalf("approval %+v: want approved by the token's principal", a)
	}
	ended := must[*trellis.Run](t)(e.client.Wait(ctx, run.ID))
	var principal string
	if err := json.Unmarshal(ended.Output, &principal); err != nil || principal != a.Principal {
		t.Fatalf("run output %s, want %q", ended.Output, a.Principal)
	}
	if _, err := e.client.Approve(ctx, a.ID, "", ""); !errors.Is(err, trellis.ErrApprovalDecided) {
		t.Fatalf("second decision: %v, want ErrApprovalDecided", err)
	}
	ws := must[[]*trellis.WorkerRecord](t)(e.client.Workers(ctx))
	if len(ws) == 0 {
		t.Fatal("workers: none")
	}
}

func TestRemoteConfig(t *testing.T) {
	ctx := context.Background()
	if _, err := trellis.Open(ctx, trellis.Config{Server: "http://127.0.0.1:1", Store: "sqlite:x.db"}); err == nil {
		t.Fatal("Server with Store: no error")
	}
	if _, err := trellis.Open(ctx, trellis.Config{Server: "ftp://x"}); err == nil {
		t.Fatal("ftp server URL: no error")
	}
	c, err := trellis.Open(ctx, trellis.Config{Server: "http://127.0.0.1:1"}) // nothing listens on port 1
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Get(ctx, "x"); !errors.Is(err, trellis.ErrUnavailable) {
		t.Fatalf("get with no server: %v, want ErrUnavailable", err)
	}
}

func TestRemoteClosed(t *testing.T) {
	e := newRemoteEnv(t)
	c := e.open(t, e.token)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Get(ctxT(t), "x"); !errors.Is(err, trellis.ErrClosed) {
		t.Fatalf("get after close: %v, want ErrClosed", err)
	}
}

var remoteParent = trellis.NewWorkflow("remote-parent", func(wc *trellis.Context, _ any) (int, error) {
	outs, err := trellis.Map(wc, remoteEcho, []map[string]any{{"i": 0}, {"i": 1}, {"i": 2}})
	return len(outs), err
})

// Through a server, the client reads a run's children (and so exports a history
// with them, as on a store), lists runs by workflow ID and gets one approval.
func TestRemoteChildrenWorkflowIDApproval(t *testing.T) {
	e := newRemoteEnv(t)
	ctx := ctxT(t)
	register(t, e.worker, remoteParent)
	h := must[*trellis.Handle[int]](t)(trellis.Start(ctx, e.client, remoteParent, nil, trellis.StartOptions{ID: "fam"}))
	if n := mustResult(t, h); n != 3 {
		t.Fatalf("parent result %d", n)
	}
	remote := must[*trellis.RecordedHistory](t)(e.client.ExportHistory(ctx, "fam"))
	local := must[*trellis.RecordedHistory](t)(e.worker.ExportHistory(ctx, "fam"))
	got, _ := json.Marshal(remote.Ops)
	want, _ := json.Marshal(local.Ops)
	if remote.Run.ID != local.Run.ID || string(got) != string(want) {
		t.Fatalf("history through the server:\n%s\non the store:\n%s", got, want)
	}
	kids := 0
	for _, op := range remote.Ops {
		kids += len(op.Children)
	}
	if kids != 3 {
		t.Fatalf("%d children in the exported history, want 3", kids)
	}
	page := must[*trellis.RunPage](t)(e.client.List(ctx, trellis.ListOptions{WorkflowID: "fam"}))
	if len(page.Runs) != 1 || page.Runs[0].ID != h.RunID() {
		t.Fatalf("runs of workflow ID fam: %+v", page.Runs)
	}

	must[*trellis.Run](t)(e.client.StartRaw(ctx, "remote-approval", nil, trellis.StartOptions{ID: "ap"}))
	var list *trellis.ApprovalList
	for list == nil || len(list.Approvals) == 0 {
		time.Sleep(20 * time.Millisecond)
		run := must[*trellis.Run](t)(e.client.Get(ctx, "ap"))
		list = must[*trellis.ApprovalList](t)(e.client.Approvals(ctx, trellis.ApprovalFilter{Run: run.ID}))
	}
	a := must[*trellis.ApprovalRecord](t)(e.client.GetApproval(ctx, list.Approvals[0].ID))
	if a.ID != list.Approvals[0].ID || a.Status != trellis.ApprovalPending {
		t.Fatalf("approval %+v", a)
	}
}
