package storejs

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// A follower taking over while the log's stream elects its leader writes as
// soon as the stream has one: each attempt gives up after a lease's time,
// not after JetStream's 5 s API timeout, which made SIGKILL failovers of
// three `trellis server` processes take up to 5 s past the elections.
//
// Five servers: the log's stream on the first three, the lease's bucket on
// the last three. The log's three stop (the writer's among them): the lease
// lapses and the follower takes it; the log has no server and the cluster
// no meta leader to answer for it, so requests go unanswered, as after a
// SIGKILL. Two of the log's start again; from the moment the stream answers
// with a leader, the follower writes within 2.5 s.
func TestTakeOverFollowsTheLogsElection(t *testing.T) {
	if testing.Short() {
		t.Skip("a five-server cluster whose log stream loses and regains its quorum")
	}
	ctx := context.Background()
	opts := clusterOpts(t, 5)
	tag(opts[:3], "log")
	tag(opts[2:], "lease")
	servers := startServers(t, opts)
	probe := connectTo(t, servers[3])
	js, err := jetstream.New(probe)
	if err != nil {
		t.Fatal(err)
	}
	logStream := createPlacedLog(t, js, "log")
	if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: leaseBucket("default"), History: 1,
		Storage: jetstream.FileStorage, Replicas: 3, Placement: &jetstream.Placement{Tags: []string{"lease"}}}); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	// The writer's connection ends with its server (no reconnecting to
	// another): it can renew the lease no more.
	nc, err := nats.Connect(servers[0].ClientURL(), nats.NoReconnect())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	a := openStore(t, Config{Conn: nc, Replica: filepath.Join(dir, "a.db"), Replicas: 3, LeaseDuration: time.Second})
	waitLeading(t, a)
	if err := createRun(ctx, view(a), "before"); err != nil {
		t.Fatal(err)
	}
	b := openStore(t, Config{Conn: connectTo(t, servers[3]), Replica: filepath.Join(dir, "b.db"), Replicas: 3, LeaseDuration: time.Second})

	for _, s := range servers[:3] {
		s.Shutdown()
		s.WaitForShutdown()
	}
	time.Sleep(3 * time.Second) // the follower's attempts meet a log without a leader
	if b.Leading() {
		t.Fatal("the follower writes a log that has no leader")
	}
	for _, o := range opts[:2] {
		restarted, err := server.NewServer(o)
		if err != nil {
			t.Fatal(err)
		}
		go restarted.Start()
		t.Cleanup(func() { restarted.Shutdown(); restarted.WaitForShutdown() })
	}

	var elected time.Time
	deadline := time.Now().Add(30 * time.Second)
	for elected.IsZero() && time.Now().Before(deadline) {
		ictx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		info, err := logStream.Info(ictx)
		cancel()
		if err == nil && info.Cluster != nil && info.Cluster.Leader != "" {
			elected = time.Now()
		}
	}
	if elected.IsZero() {
		t.Fatal("the log's stream elected no leader within 30s of a second server's restart")
	}
	for !b.Leading() {
		if time.Since(elected) > 10*time.Second {
			t.Fatal("the follower did not take over within 10s of the log's election")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if took := time.Since(elected); took > 2500*time.Millisecond {
		t.Fatalf("the follower took over %s after the log's stream had a leader, want at most 2.5s", took)
	} else {
		t.Logf("the follower took over %s after the log's stream had a leader", took)
	}
	if err := createRun(ctx, view(b), "after"); err != nil {
		t.Fatalf("a write on the new writer: %v", err)
	}
}
