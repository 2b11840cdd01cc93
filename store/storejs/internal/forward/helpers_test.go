package forward_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"go.uber.org/goleak"

	"github.com/trellis-dev/trellis/store/storejs/internal/forward"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// startNATS starts an in-process nats-server on a free port, stopped when the
// test ends.
func startNATS(t testing.TB) *server.Server {
	t.Helper()
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatalf("nats-server: %v", err)
	}
	s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	return s
}

// connect opens a connection to s, closed when the test ends.
func connect(t testing.TB, s *server.Server) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatalf("connecting: %v", err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// serve serves h on subject over its own connection to s; stopped when the
// test ends (or earlier, by the returned function).
func serve(t testing.TB, s *server.Server, subject string, h forward.Handler) (stop func()) {
	t.Helper()
	stop, err := forward.Serve(connect(t, s), subject, h)
	if err != nil {
		t.Fatalf("Serve: %v", err)
	}
	t.Cleanup(stop)
	return stop
}

// waits records the sequences a Client waited for.
type waits struct {
	mu   sync.Mutex
	seqs []uint64
}

func (w *waits) wait(_ context.Context, seq uint64) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.seqs = append(w.seqs, seq)
	return nil
}

func (w *waits) got() []uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]uint64(nil), w.seqs...)
}

// echo is a handler that answers method "echo" with its parameters and
// sequence 7, and refuses other methods.
func echo(_ context.Context, method string, params json.RawMessage) (any, uint64, error) {
	if method != "echo" {
		return nil, 0, forward.ErrUnknownMethod
	}
	var p payload
	if err := forward.Unmarshal(params, &p); err != nil {
		return nil, 0, err
	}
	return &p, 7, nil
}

type payload struct {
	Name  string
	At    time.Time
	Data  []byte
	Count *int64
	Tags  map[string]string
	Err   error
}

// eventually polls cond (a condition the test cannot be signalled of) until it
// holds or 10 s pass.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// inMsgs is how many messages s has received from clients.
func inMsgs(t *testing.T, s *server.Server) int64 {
	t.Helper()
	v, err := s.Varz(nil)
	if err != nil {
		t.Fatalf("Varz: %v", err)
	}
	return v.InMsgs
}
