package storejs_test

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/trellis-dev/trellis/internal/auth"
	"github.com/trellis-dev/trellis/store"
	"github.com/trellis-dev/trellis/store/storejs"
	"github.com/trellis-dev/trellis/store/storejs/internal/forward"
)

// forwarding is a leader's Store on a real SQLite replica serving forwarded
// writes over a real nats-server, and a follower's client of it.
type forwarding struct {
	leader *storejs.Store
	client *forward.Client

	mu     sync.Mutex
	waited []uint64 // the sequences the client waited for
	seq    atomic.Uint64
}

func setupForwarding(t *testing.T) *forwarding {
	t.Helper()
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	conn := func() *nats.Conn {
		nc, err := nats.Connect(ns.ClientURL())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		return nc
	}
	f := &forwarding{leader: storejs.NewOverReplica(openReplica(t))}
	stop, err := forward.Serve(conn(), "trellis.test.writes", func(ctx context.Context, method string, raw json.RawMessage) (any, uint64, error) {
		res, err := storejs.ServeForwarded(f.leader, ctx, method, raw)
		return res, f.seq.Add(1), err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	f.client = &forward.Client{NC: conn(), Subject: "trellis.test.writes", Wait: func(_ context.Context, seq uint64) error {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.waited = append(f.waited, seq)
		return nil
	}}
	return f
}

func createParams(id string) *store.RunCreateParams {
	return &store.RunCreateParams{Namespace: "default", ID: id, WorkflowID: "wf-" + id, Workflow: "greet",
		Queue: "default", Input: []byte(`{"name":"Ada"}`)}
}

// TestForwardedWrites runs real writes through serveForwarded over NATS
// against a real replica: results arrive whole, refusals as the store's
// sentinels, and each call waits for the leader's sequence.
func TestForwardedWrites(t *testing.T) {
	t.Parallel()
	f := setupForwarding(t)
	ctx := context.Background()

	var created *store.RunCreateResult
	if err := f.client.Call(ctx, "RunCreate", createParams("r1"), &created); err != nil || !created.Created || created.Run.ID != "r1" {
		t.Fatalf("RunCreate: %+v, %v", created, err)
	}
	dup := createParams("r2")
	dup.WorkflowID = "wf-r1"
	err := f.client.Call(ctx, "RunCreate", dup, &created)
	if !errors.Is(err, store.ErrRunExists) || !strings.Contains(err.Error(), `"wf-r1"`) {
		t.Fatalf("a second start of wf-r1: %v, want ErrRunExists naming it", err)
	}

	var claimed *store.RunsClaimResult
	err = f.client.Call(ctx, "RunsClaim", &store.RunsClaimParams{Namespace: "default", Workflows: []string{"greet"},
		Worker: "w1", Max: 10, LeaseDuration: time.Minute}, &claimed)
	if err != nil || len(claimed.Runs) != 1 || claimed.Runs[0].Run.ID != "r1" {
		t.Fatalf("RunsClaim: %+v, %v", claimed, err)
	}
	cr := claimed.Runs[0]
	stale := cr.Lease()
	stale.Token++
	err = f.client.Call(ctx, "Checkpoint", &store.CheckpointParams{Lease: stale, Status: store.StatusSucceeded, Output: []byte(`1`)}, nil)
	if !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("Checkpoint with a stale lease: %v, want ErrLeaseLost", err)
	}
	var cp *store.CheckpointResult
	err = f.client.Call(ctx, "Checkpoint", &store.CheckpointParams{Lease: cr.Lease(), Status: store.StatusSucceeded, Output: []byte(`"hi Ada"`)}, &cp)
	if err != nil || cp.At.IsZero() {
		t.Fatalf("Checkpoint: %+v, %v", cp, err)
	}
	run, err := f.leader.RunGet(ctx, &store.RunGetParams{Namespace: "default", Ref: "r1"})
	if err != nil || run.Status != store.StatusSucceeded || string(run.Output) != `"hi Ada"` {
		t.Fatalf("the leader's run: %+v, %v", run, err)
	}

	for ref, want := range map[string]error{"r1": store.ErrRunFinished, "nope": store.ErrRunNotFound} {
		err := f.client.Call(ctx, "EventSend", &store.EventSendParams{Namespace: "default", Ref: ref, Name: "go"}, nil)
		if !errors.Is(err, want) {
			t.Fatalf("EventSend to %s: %v, want %v", ref, err, want)
		}
	}

	hash := sha256.Sum256([]byte("secret"))
	tp := &store.TokenCreateParams{Name: "ci", Grants: []auth.Grant{{Role: auth.RoleProducer, Namespace: "default"}}, Hash: hash[:]}
	var tok *store.Token
	if err := f.client.Call(ctx, "TokenCreate", tp, &tok); err != nil || tok.Name != "ci" || len(tok.Grants) != 1 {
		t.Fatalf("TokenCreate: %+v, %v", tok, err)
	}
	if err := f.client.Call(ctx, "TokenCreate", tp, &tok); !errors.Is(err, store.ErrTokenExists) {
		t.Fatalf("TokenCreate again: %v, want ErrTokenExists", err)
	}

	// A batch whose second item is refused: the item's error crosses the wire.
	dup = createParams("r4")
	dup.WorkflowID, dup.Reuse = "wf-r1", store.ReuseReject // r1 finished: only "reject" refuses
	var batch *store.RunsCreateResult
	err = f.client.Call(ctx, "RunsCreate", &store.RunsCreateParams{Namespace: "default",
		Runs: []*store.RunCreateParams{createParams("r3"), dup}}, &batch)
	if err != nil || len(batch.Items) != 2 || !batch.Items[0].Created || !errors.Is(batch.Items[1].Err, store.ErrRunExists) {
		t.Fatalf("RunsCreate: %+v, %v", batch, err)
	}

	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.waited) == 0 || !slices.IsSorted(f.waited) {
		t.Fatalf("the client waited for %v", f.waited)
	}
}

// TestForwardedBadInput: a read, an unknown method, missing or malformed
// parameters, and a func that cannot travel are refused with clear errors,
// and nothing is written.
func TestForwardedBadInput(t *testing.T) {
	t.Parallel()
	f := setupForwarding(t)
	ctx := context.Background()
	for _, method := range []string{"RunGet", "RunDestroy", ""} {
		if err := f.client.Call(ctx, method, &store.RunGetParams{Namespace: "default", Ref: "x"}, nil); !errors.Is(err, forward.ErrUnknownMethod) {
			t.Errorf("%q: %v, want ErrUnknownMethod", method, err)
		}
	}
	for name, in := range map[string]any{
		"nil":           nil,
		"unknown field": struct{ Namespace, Bogus string }{"default", "x"},
		"wrong type":    struct{ Namespace int }{7},
		"invalid":       &store.RunCreateParams{Namespace: "default"}, // the store's own validation
	} {
		err := f.client.Call(ctx, "RunCreate", in, nil)
		if !errors.Is(err, store.ErrInvalidParams) {
			t.Errorf("RunCreate with %s parameters: %v, want ErrInvalidParams", name, err)
		}
	}
	p := createParams("r1")
	p.Idempotency = &store.IdempotencyRecord{Key: "k", Fingerprint: []byte{1},
		Response: func(any) (int, []byte, error) { return 201, nil, nil }}
	err := f.client.Call(ctx, "RunCreate", p, nil)
	if err == nil || !strings.Contains(err.Error(), "Idempotency.Response") {
		t.Fatalf("RunCreate with a Response func: %v, want a refusal naming it", err)
	}
	list, err := f.leader.RunList(ctx, &store.RunListParams{Namespace: "default"})
	if err != nil || len(list.Runs) != 0 {
		t.Fatalf("runs after refused writes: %+v, %v", list, err)
	}
}
