package storesqlite_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/trellis-dev/trellis/store"
)

func TestSmoke(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, clk, _ := setup(t)
	r := createRun(t, s, "r1")
	if r.Sequence == 0 || r.Status != store.StatusPending || !r.CreatedAt.Equal(clk.Now()) {
		t.Fatalf("created %+v", r)
	}
	claimed := claimAll(t, s, 10)
	if len(claimed) != 1 || claimed[0].LeaseToken <= 0 || claimed[0].Run.Attempts != 1 {
		t.Fatalf("claimed %+v", claimed)
	}
	c := claimed[0]
	firstToken := c.LeaseToken
	lease := store.Lease{Namespace: "ns", RunID: "r1", Token: c.LeaseToken}
	now := clk.Now()
	_, err := s.Checkpoint(ctx, &store.CheckpointParams{
		Lease:    lease,
		Ops:      []*store.Op{{Position: 0, Kind: store.OpStep, Name: "a", Done: true, Result: []byte("1"), Attempts: 2, StartedAt: now, FinishedAt: &now}},
		Attempts: []store.Attempt{{Position: 0, Attempt: 1, Error: store.ErrorInfo{Message: "boom"}, StartedAt: now, FinishedAt: now}},
		KV:       []store.KVWrite{{Key: "k", Value: []byte("v")}, {Key: "empty"}},
		Status:   store.StatusWaiting, WaitReason: "sleep", WakeAt: new(now.Add(time.Hour)),
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Checkpoint(ctx, &store.CheckpointParams{Lease: lease, Status: store.StatusRunning}); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("want lease lost, got %v", err)
	}
	h, err := s.HistoryList(ctx, &store.HistoryListParams{Namespace: "ns", Ref: "wf-r1"})
	if err != nil || len(h) != 1 || len(h[0].AttemptLog) != 1 || h[0].AttemptLog[0].Error.Message != "boom" {
		t.Fatalf("history %+v %v", h, err)
	}
	v, err := s.KVGet(ctx, &store.KVGetParams{Namespace: "ns", Ref: "r1", Key: "k"})
	if err != nil || string(v) != "v" {
		t.Fatalf("kv %q %v", v, err)
	}
	v, err = s.KVGet(ctx, &store.KVGetParams{Namespace: "ns", Ref: "r1", Key: "empty"})
	if err != nil || v == nil || len(v) != 0 {
		t.Fatalf("kv empty %q %v", v, err)
	}
	if _, err = s.KVGet(ctx, &store.KVGetParams{Namespace: "ns", Ref: "r1", Key: "x"}); !errors.Is(err, store.ErrKeyNotFound) {
		t.Fatal(err)
	}
	if _, err = s.KVGet(ctx, &store.KVGetParams{Namespace: "ns", Ref: "zz", Key: "x"}); !errors.Is(err, store.ErrRunNotFound) {
		t.Fatal(err)
	}
	res, err := s.RunsClaim(ctx, &store.RunsClaimParams{Namespace: "ns", Workflows: []string{"w"}, Max: 5, LeaseDuration: time.Minute})
	if err != nil || len(res.Runs) != 0 || res.NextDue == nil || !res.NextDue.Equal(now.Add(time.Hour)) {
		t.Fatalf("claim %+v %v", res, err)
	}
	clk.Advance(time.Hour)
	claimed = claimAll(t, s, 10)
	if len(claimed) != 1 || claimed[0].LeaseToken <= firstToken || len(claimed[0].History) != 1 {
		t.Fatalf("claimed %+v", claimed)
	}
	got, err := s.RunGet(ctx, &store.RunGetParams{Namespace: "ns", Ref: "r1"})
	if err != nil || got.Status != store.StatusRunning || got.LeaseExpiresAt == nil {
		t.Fatalf("get %+v %v", got, err)
	}
	list, err := s.RunList(ctx, &store.RunListParams{Namespace: "ns"})
	if err != nil || len(list.Runs) != 1 {
		t.Fatalf("list %+v %v", list, err)
	}
}
