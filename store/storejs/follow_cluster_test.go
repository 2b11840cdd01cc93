package storejs

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// A follower whose reader's consumer was on a server that stops goes on
// applying the log within a few heartbeats (readHeartbeat) of the next
// record: nats.go's default for ordered consumers, a 5 s heartbeat missed
// twice, kept such a follower (and every write forwarded through it, which
// waits to read itself) still for 10 s after a SIGKILL.
//
// Four servers: the log's stream on the first three, the two stores
// connected to the fourth, which stays. The server holding the follower's
// consumer stops; the writer appends; the follower applies the record.
func TestFollowerReadsOnWhenItsConsumersServerStops(t *testing.T) {
	if testing.Short() {
		t.Skip("a four-server cluster, one of which stops")
	}
	ctx := context.Background()
	opts := clusterOpts(t, 4)
	tag(opts[:3], "log")
	servers := startServers(t, opts)
	js, err := jetstream.New(connectTo(t, servers[3]))
	if err != nil {
		t.Fatal(err)
	}
	logStream := createPlacedLog(t, js, "log")
	dir := t.TempDir()
	a := openStore(t, Config{Conn: connectTo(t, servers[3]), Replica: filepath.Join(dir, "a.db"), Replicas: 3, LeaseDuration: 2 * time.Second})
	waitLeading(t, a)
	b := openStore(t, Config{Conn: connectTo(t, servers[3]), Replica: filepath.Join(dir, "b.db"), Replicas: 3, LeaseDuration: 2 * time.Second})
	if err := createRun(ctx, view(a), "before"); err != nil {
		t.Fatal(err)
	}
	waitApplied(t, b, a.appliedSeq(), 10*time.Second)

	// The follower's reader is the stream's one consumer.
	var host string
	for c := range logStream.ListConsumers(ctx).Info() {
		if c.Cluster != nil {
			host = c.Cluster.Leader
		}
	}
	victim := -1
	for i, s := range servers[:3] {
		if s.Name() == host {
			victim = i
		}
	}
	if victim < 0 {
		t.Fatalf("the follower's consumer is on %q, not on a server of the log", host)
	}
	servers[victim].Shutdown()
	servers[victim].WaitForShutdown()

	if err := retryWrite(ctx, func() error { return createRun(ctx, view(a), "after") }); err != nil {
		t.Fatal(err)
	}
	written := time.Now()
	waitApplied(t, b, a.appliedSeq(), 30*time.Second)
	took := time.Since(written)
	t.Logf("the follower applied the record written after its consumer's server (%s) stopped %s later", host, took.Round(time.Millisecond))
	if took > 5*time.Second { // 9.9 s with a 5 s heartbeat
		t.Fatalf("the follower applied the next record %s after it was written, want at most 5s", took)
	}
}

// retryWrite retries a write while the log's stream elects a new leader.
func retryWrite(ctx context.Context, f func() error) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := f()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func waitApplied(t *testing.T, s *Store, seq uint64, within time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	if err := s.waitApplied(ctx, seq); err != nil {
		t.Fatalf("the replica did not apply the log up to %d within %s (it is at %d): %v", seq, within, s.appliedSeq(), err)
	}
}
