package forward_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/trellis-dev/trellis/store"
	"github.com/trellis-dev/trellis/store/storejs/internal/forward"
)

// checkpoint is a typical checkpoint: one step's op with a small result.
func checkpoint() *store.CheckpointParams {
	at := time.Date(2031, 1, 2, 3, 4, 5, 6, time.UTC)
	return &store.CheckpointParams{
		Lease:  store.Lease{Namespace: "default", RunID: "01JABCDEFGHJKMNPQRSTVWXYZ0", Token: 42, RunSeq: 7, Queue: "default", Secret: "s"},
		Status: store.StatusRunning, Seq: 3,
		Ops: []*store.Op{{Position: 2, Name: "charge", Kind: store.OpStep, Done: true, Attempts: 1,
			Result: []byte(`{"charge_id":"ch_123","amount":4200}`), StartedAt: at, FinishedAt: &at}},
	}
}

// BenchmarkCall is one forwarded call's round trip through an in-process
// nats-server over localhost TCP: a Checkpoint's parameters there and back,
// with no store behind it (the forwarding's own cost).
func BenchmarkCall(b *testing.B) {
	ns := startNATS(b)
	serve(b, ns, "fwd.bench", func(_ context.Context, _ string, raw json.RawMessage) (any, uint64, error) {
		var p *store.CheckpointParams
		err := forward.Unmarshal(raw, &p)
		return p, 1, err
	})
	c := &forward.Client{NC: connect(b, ns), Subject: "fwd.bench"}
	p := checkpoint()
	b.Run("serial", func(b *testing.B) {
		for b.Loop() {
			var out *store.CheckpointParams
			if err := c.Call(context.Background(), "Checkpoint", p, &out); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.SetParallelism(16)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				var out *store.CheckpointParams
				if err := c.Call(context.Background(), "Checkpoint", p, &out); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}

// BenchmarkMarshal compares the wire encoding with encoding/json (which
// would lose the json:"-" fields) on a Checkpoint's parameters, encoded and
// decoded.
func BenchmarkMarshal(b *testing.B) {
	p := checkpoint()
	b.Run("forward", func(b *testing.B) {
		for b.Loop() {
			data, err := forward.Marshal(p)
			if err != nil {
				b.Fatal(err)
			}
			var q *store.CheckpointParams
			if err := forward.Unmarshal(data, &q); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding/json", func(b *testing.B) {
		for b.Loop() {
			data, err := json.Marshal(p)
			if err != nil {
				b.Fatal(err)
			}
			var q *store.CheckpointParams
			if err := json.Unmarshal(data, &q); err != nil {
				b.Fatal(err)
			}
		}
	})
}
