package forward_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/trellis-dev/trellis/store/storejs/internal/forward"
)

// TestMaxPayload: a request larger than the server's maximum payload is
// refused before it is sent (not an unknown outcome, the handler never runs);
// a result too large to answer comes back as an error that says the write
// was applied, not as a timeout.
func TestMaxPayload(t *testing.T) {
	t.Parallel()
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true, MaxPayload: 4096})
	if err != nil {
		t.Fatal(err)
	}
	ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	var ran atomic.Int32
	serve(t, ns, "fwd.big", func(_ context.Context, method string, _ json.RawMessage) (any, uint64, error) {
		ran.Add(1)
		return strings.Repeat("x", 8192), 3, nil
	})
	c := &forward.Client{NC: connect(t, ns), Subject: "fwd.big"}

	err = c.Call(context.Background(), "write", strings.Repeat("y", 8192), nil)
	if !errors.Is(err, nats.ErrMaxPayload) || errors.Is(err, forward.ErrOutcomeUnknown) || ran.Load() != 0 {
		t.Fatalf("a request over the maximum: %v (handler ran %d times), want ErrMaxPayload", err, ran.Load())
	}
	var out string
	err = c.Call(context.Background(), "write", "small", &out)
	if err == nil || !strings.Contains(err.Error(), "a write was applied") || ran.Load() != 1 {
		t.Fatalf("a result over the maximum: %v, want an error saying the write was applied", err)
	}
}
