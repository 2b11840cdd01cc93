package storejs

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/trellis-dev/trellis/store"
)

// TestFollowerForwardsWrites: two stores on one log. The follower's writes
// (the generated methods) reach the writer through internal/forward, come
// back with the store's sentinels, and are readable on the follower as soon
// as they return; after a takeover the deposed writer's write goes to the
// new one.
func TestFollowerForwardsWrites(t *testing.T) {
	ctx := context.Background()
	a, b := writerAndFollower(t, nil)
	if b.Leading() {
		t.Fatal("the follower leads")
	}

	p := &store.RunCreateParams{Namespace: "default", ID: "r1", WorkflowID: "w1", Workflow: "wf", Queue: "default", Input: []byte(`{}`)}
	if res, err := b.RunCreate(ctx, p); err != nil || !res.Created {
		t.Fatalf("RunCreate on the follower: %+v, %v", res, err)
	}
	for name, s := range map[string]*Store{"follower": b, "writer": a} {
		if _, err := s.RunGet(ctx, &store.RunGetParams{Namespace: "default", Ref: "r1"}); err != nil {
			t.Fatalf("RunGet on the %s right after the write: %v", name, err)
		}
	}
	dup := *p
	dup.ID = "r2"
	if _, err := b.RunCreate(ctx, &dup); !errors.Is(err, store.ErrRunExists) {
		t.Fatalf("a second start of w1 on the follower: %v, want ErrRunExists", err)
	}
	claimed, err := b.RunsClaim(ctx, &store.RunsClaimParams{Namespace: "default", Workflows: []string{"wf"}, Worker: "w", Max: 1, LeaseDuration: time.Minute})
	if err != nil || len(claimed.Runs) != 1 {
		t.Fatalf("RunsClaim on the follower: %+v, %v", claimed, err)
	}
	stale := claimed.Runs[0].Lease()
	stale.Token++
	if _, err := b.Checkpoint(ctx, &store.CheckpointParams{Lease: stale, Status: store.StatusSucceeded}); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("a checkpoint with a stale lease on the follower: %v, want ErrLeaseLost", err)
	}
	if _, err := b.Checkpoint(ctx, &store.CheckpointParams{Lease: claimed.Runs[0].Lease(), Status: store.StatusSucceeded, Output: []byte(`7`)}); err != nil {
		t.Fatalf("Checkpoint on the follower: %v", err)
	}
	if run, err := b.RunGet(ctx, &store.RunGetParams{Namespace: "default", Ref: "r1"}); err != nil || run.Status != store.StatusSucceeded {
		t.Fatalf("the follower reads %+v, %v after its checkpoint", run, err)
	}
	if _, err := b.EventSend(ctx, &store.EventSendParams{Namespace: "default", Ref: "nope", Name: "e"}); !errors.Is(err, store.ErrRunNotFound) {
		t.Fatalf("EventSend to no run on the follower: %v, want ErrRunNotFound", err)
	}

	if err := b.TakeOver(ctx); err != nil {
		t.Fatal(err)
	}
	p.ID, p.WorkflowID = "r3", "w3"
	if _, err := a.RunCreate(ctx, p); err != nil {
		t.Fatalf("RunCreate on the deposed writer: %v", err)
	}
	for name, s := range map[string]*Store{"deposed writer": a, "new writer": b} {
		if _, err := s.RunGet(ctx, &store.RunGetParams{Namespace: "default", Ref: "r3"}); err != nil {
			t.Fatalf("RunGet of r3 on the %s: %v", name, err)
		}
	}
}

// BenchmarkRunCreate: a run's start on the writer and on a follower (forwarded,
// then waited for in the follower's replica), with fsync on every JetStream
// write.
func BenchmarkRunCreate(b *testing.B) {
	srv := startNATS(b, b.TempDir())
	dir := b.TempDir()
	open := func(name string) *Store {
		s, err := Open(context.Background(), Config{Conn: connectTo(b, srv), Replica: filepath.Join(dir, name), LeaseDuration: time.Hour})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { s.Close() })
		return s
	}
	a := open("a.db")
	for !a.Leading() {
		time.Sleep(5 * time.Millisecond)
	}
	f := open("b.db")
	var n atomic.Int64
	for name, s := range map[string]*Store{"writer": a, "follower": f} {
		b.Run(name, func(b *testing.B) {
			b.SetParallelism(8)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					id := fmt.Sprint("r", n.Add(1))
					if _, err := s.RunCreate(context.Background(), &store.RunCreateParams{Namespace: "default", ID: id, WorkflowID: id, Workflow: "wf", Queue: "default"}); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// A follower's keyed start: the idempotency record's renderer is named, so
// the writer renders and keeps the same response the follower's own
// Response would have, in the start's transaction.
func TestFollowerForwardsIdempotencyKeys(t *testing.T) {
	ctx := context.Background()
	a, b := writerAndFollower(t, nil)
	store.RegisterIdempotencyRenderer("test.runID", func(status int, result any) (int, []byte, error) {
		return status, []byte(result.(*store.RunCreateResult).Run.ID), nil
	})
	rec := &store.IdempotencyRecord{Key: "k1", Fingerprint: []byte("fp"), Renderer: "test.runID", Status: 201}
	local := *rec
	if err := local.RebuildResponse(); err != nil {
		t.Fatal(err)
	}
	rec.Response = local.Response // the caller sets both; only the name travels
	p := &store.RunCreateParams{Namespace: "default", ID: "r1", WorkflowID: "w1", Workflow: "wf", Queue: "default", Idempotency: rec}
	if _, err := b.RunCreate(ctx, p); err != nil {
		t.Fatalf("keyed start on the follower: %v", err)
	}
	for name, s := range map[string]*Store{"follower": b, "writer": a} {
		e, err := s.IdempotencyGet(ctx, &store.IdempotencyGetParams{Namespace: "default", Key: "k1"})
		if err != nil || e.Status != 201 || string(e.Body) != "r1" {
			t.Errorf("the key on the %s: %+v, %v; want status 201 and body r1", name, e, err)
		}
	}
	// A record whose Response cannot travel is refused, and writes nothing.
	p = &store.RunCreateParams{Namespace: "default", ID: "r2", WorkflowID: "w2", Workflow: "wf", Queue: "default",
		Idempotency: &store.IdempotencyRecord{Key: "k2", Fingerprint: []byte("fp"), Response: local.Response}}
	if _, err := b.RunCreate(ctx, p); err == nil {
		t.Fatal("a keyed start whose renderer has no name was forwarded")
	}
	if _, err := a.RunGet(ctx, &store.RunGetParams{Namespace: "default", Ref: "r2"}); !errors.Is(err, store.ErrRunNotFound) {
		t.Errorf("the refused start: %v, want no run", err)
	}
	// An unknown renderer name is refused by the writer.
	p.Idempotency = &store.IdempotencyRecord{Key: "k3", Fingerprint: []byte("fp"), Renderer: "test.nope", Response: local.Response}
	if _, err := b.RunCreate(ctx, p); !errors.Is(err, store.ErrInvalidParams) {
		t.Errorf("an unknown renderer: %v, want invalid parameters", err)
	}
}
