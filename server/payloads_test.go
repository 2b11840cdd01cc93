package server

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/trellis-dev/trellis/store"
	"github.com/trellis-dev/trellis/store/storeremote"
)

// A remote worker learns its run's queue payload limit with the claim
// (ClaimedRun.payload_limit), and the server refuses a checkpoint that
// carries a payload above it, writing nothing, whatever the worker checks.
func TestWorkerQueuePayloadLimit(t *testing.T) {
	for name, url := range storeURLs(t) {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, url(t))
			e.do("POST", "/v1/namespaces/default/queues", "admin", map[string]any{"name": "tiny", "payload_limit": 100}).want(t, 201)
			e.do("POST", "/v1/namespaces/default/runs", "admin", map[string]any{"workflow": "remote-only", "queue": "tiny", "input": "x"}).want(t, 201)
			rs, err := storeremote.New(storeremote.Config{URL: e.base, Namespace: "default", Token: "admin"})
			if err != nil {
				t.Fatal(err)
			}
			defer rs.Close()
			var cr *store.ClaimedRun
			for deadline := time.Now().Add(5 * time.Second); cr == nil && time.Now().Before(deadline); {
				res, err := rs.RunsClaim(t.Context(), &store.RunsClaimParams{Namespace: "default", Workflows: []string{"remote-only"},
					Worker: "w", Max: 1, LeaseDuration: 10 * time.Second})
				if err != nil {
					t.Fatal(err)
				}
				if len(res.Runs) == 1 {
					cr = res.Runs[0]
				}
			}
			if cr == nil {
				t.Fatal("the run was not claimed")
			}
			if cr.PayloadLimit != 100 {
				t.Fatalf("claimed with payload limit %d, want the queue's 100", cr.PayloadLimit)
			}
			now := time.Now()
			step := func(result string) *store.Op {
				return &store.Op{Position: 0, Kind: store.OpStep, Name: "s", Done: true, Result: []byte(result), Attempts: 1, StartedAt: now, FinishedAt: &now}
			}
			big := `"` + strings.Repeat("x", 200) + `"`
			_, err = rs.Checkpoint(t.Context(), &store.CheckpointParams{Lease: cr.Lease(), Status: store.StatusRunning, Ops: []*store.Op{step(big)}})
			if !errors.Is(err, store.ErrInvalidParams) || !strings.Contains(err.Error(), `payload too large: 202 bytes (queue "tiny" limit 100)`) {
				t.Fatalf("a result above the queue's limit: %v, want it refused", err)
			}
			_, err = rs.Checkpoint(t.Context(), &store.CheckpointParams{Lease: cr.Lease(), Status: store.StatusSucceeded, Output: []byte(big)})
			if !errors.Is(err, store.ErrInvalidParams) {
				t.Fatalf("an output above the queue's limit: %v, want it refused", err)
			}
			if ops, err := e.st.HistoryList(t.Context(), &store.HistoryListParams{Namespace: "default", Ref: cr.Run.ID}); err != nil || len(ops) != 0 {
				t.Fatalf("the refused checkpoints wrote %d ops (%v)", len(ops), err)
			}
			if _, err := rs.Checkpoint(t.Context(), &store.CheckpointParams{Lease: cr.Lease(), Status: store.StatusSucceeded,
				Ops: []*store.Op{step(`"ok"`)}, Output: []byte(`"ok"`)}); err != nil {
				t.Fatalf("payloads within the limit: %v", err)
			}
		})
	}
}
