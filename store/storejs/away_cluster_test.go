package storejs

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/trellis-dev/trellis/internal/testport"
)

// Three stores, each embedding a NATS server of one cluster (as three
// `trellis server` processes do): the server that writes the log leads
// neither the log's stream nor the lease's bucket for long (leadersAway),
// so that its SIGKILL leaves JetStream no group to re-elect before another
// server writes.
func TestWriterLeadsNoneOfJetStreamsGroups(t *testing.T) {
	if testing.Short() {
		t.Skip("three stores with embedded NATS servers forming a cluster")
	}
	stores, writer := awayCluster(t, 200*time.Millisecond)
	acc := writer.srv.GlobalAccount().GetName()
	for _, stream := range []string{streamName("default"), "KV_" + leaseBucket("default")} {
		// Move the group's leadership around (each step-down elects one of
		// the other two) until the writer's server has it, then see it go.
		caught := false
		for range 20 {
			var leader *Store
			for _, s := range stores {
				if s.srv.JetStreamIsStreamLeader(acc, stream) {
					leader = s
				}
			}
			if leader == writer {
				caught = true
				break
			}
			if leader != nil {
				if err := leader.srv.JetStreamStepdownStream(acc, stream); err != nil {
					t.Fatal(err)
				}
			}
			time.Sleep(20 * time.Millisecond)
		}
		if !caught {
			t.Logf("%s: its leadership never reached the writer's server", stream)
			continue
		}
		since := time.Now()
		for writer.srv.JetStreamIsStreamLeader(acc, stream) {
			if time.Since(since) > 3*time.Second {
				t.Fatalf("the writer's server still leads %s 3s after it was seen to", stream)
			}
			time.Sleep(10 * time.Millisecond)
		}
		t.Logf("%s: the writer's server handed its leadership over %s after it was seen to lead it", stream, time.Since(since).Round(time.Millisecond))
		if !writer.Leading() {
			t.Fatal("the writer stopped writing")
		}
	}
	if err := createRun(context.Background(), view(writer), "after"); err != nil {
		t.Fatalf("a write with the leaders elsewhere: %v", err)
	}
}

// With one replica's server stopped, the writer's server hands a group's
// leadership to the live replica only: JetStream, left to choose, could hand
// it to the server just stopped (it counts it live for three heartbeats) and
// leave the group leaderless until an election, seconds later. With no live
// replica left, it keeps the leadership.
func TestWriterHandsLeadershipToALiveReplica(t *testing.T) {
	if testing.Short() {
		t.Skip("three stores with embedded NATS servers forming a cluster")
	}
	stores, writer := awayCluster(t, time.Hour) // one hand-over per group, then the test's
	var down, live *Store
	for _, s := range stores {
		switch {
		case s == writer:
		case down == nil:
			down = s
		default:
			live = s
		}
	}
	if err := down.Close(); err != nil {
		t.Fatal(err)
	}
	acc := writer.srv.GlobalAccount().GetName()
	stream := streamName("default")
	// Bring the log's stream's leadership to the writer's server (after its
	// one automatic hand-over, which may come meanwhile, the writer keeps it)
	// and ask it for the successor.
	deadline := time.Now().Add(30 * time.Second)
	var to, why string
	for to == "" {
		if time.Now().After(deadline) {
			t.Fatalf("the writer's server named no successor within 30s while leading the log's stream: %s", why)
		}
		if !writer.srv.JetStreamIsStreamLeader(acc, stream) {
			if live.srv.JetStreamIsStreamLeader(acc, stream) {
				_ = live.srv.JetStreamStepdownStream(acc, stream)
			}
			time.Sleep(500 * time.Millisecond)
			continue
		}
		// notLeader: the leadership moved between the two calls, or another
		// replica answered the state.
		if to, why = writer.successor(stream); to == "" && !strings.HasPrefix(why, notLeader) {
			t.Fatalf("the successor with %s stopped: none (%s), want %s", down.cfg.ServerName, why, live.cfg.ServerName)
		}
		if to == "" {
			continue
		}
		if to != live.cfg.ServerName {
			t.Fatalf("the successor with %s stopped: %q, want %s", down.cfg.ServerName, to, live.cfg.ServerName)
		}
		// The leadership can also move between the successor's answer and
		// the hand-over (the writer's own automatic hand-over, under load):
		// the stream's leader then answers that it does not lead. Ask again.
		if err := writer.handOver(stream, to); err != nil {
			if !strings.Contains(err.Error(), "not leader") {
				t.Fatal(err)
			}
			why, to = err.Error(), ""
		}
	}
	deadline = time.Now().Add(5 * time.Second)
	for !live.srv.JetStreamIsStreamLeader(acc, stream) {
		if time.Now().After(deadline) {
			t.Fatalf("%s does not lead the log's stream 5s after the hand-over", live.cfg.ServerName)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := createRun(context.Background(), view(writer), "with a replica down"); err != nil {
		t.Fatalf("a write with a replica down: %v", err)
	}
	// The live replica's server stops too: no successor (the group, without
	// a quorum, may not even answer), and why.
	if err := live.Close(); err != nil {
		t.Fatal(err)
	}
	if to, why := writer.successor(stream); to != "" || why == "" {
		t.Fatalf("the successor with both other servers stopped: %q (%s), want none and why", to, why)
	} else {
		t.Logf("with both other servers stopped: %s", why)
	}
}

// awayCluster opens three stores, each embedding a NATS server of one
// cluster with the log and the lease kept three times, with leadersAway
// asking at once and then every `every`; it returns them and the one
// writing.
func awayCluster(t *testing.T, every time.Duration) ([]*Store, *Store) {
	t.Helper()
	old := leadersAwayEvery
	t.Cleanup(func() { leadersAwayEvery = old }) // after the stores' Close (cleanups run last first)
	leadersAwayEvery = every
	routes := make([]string, 3)
	for i := range routes {
		routes[i] = fmt.Sprintf("127.0.0.1:%d", testport.Free(t))
	}
	secret := writeSecret(t)
	stores := make([]*Store, 3)
	var wg sync.WaitGroup
	errs := make([]error, 3)
	for i := range stores {
		var others []string
		for j, r := range routes {
			if j != i {
				others = append(others, "nats-route://"+r)
			}
		}
		cfg := Config{Dir: filepath.Join(t.TempDir(), fmt.Sprint(i)), ClusterListen: routes[i], Routes: others,
			ServerName: fmt.Sprint("s", i+1), SecretFile: secret, Replicas: 3, LeaseDuration: time.Second}
		wg.Go(func() { stores[i], errs[i] = Open(context.Background(), cfg) })
	}
	wg.Wait()
	for i, s := range stores {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		t.Cleanup(func() { s.Close() })
	}
	var writer *Store
	deadline := time.Now().Add(30 * time.Second)
	for writer == nil {
		for _, s := range stores {
			if s.Leading() {
				writer = s
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("no store writes the log after 30s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	return stores, writer
}

// writeSecret writes a cluster secret to a file of the test's and returns
// its path.
func writeSecret(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(path, []byte(strings.Repeat("s3cr3t-", 6)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// The ports of an embedded cluster take only who knows its secret: a NATS
// client without the token, or with another, is refused; a server routing
// to it without the secret joins no cluster. A secret too short, or a file
// that is missing, stops the open with the reason.
func TestEmbeddedPortsNeedTheSecret(t *testing.T) {
	secret := writeSecret(t)
	b, err := os.ReadFile(secret)
	if err != nil {
		t.Fatal(err)
	}
	token := strings.TrimSpace(string(b))
	cfg := Config{Dir: t.TempDir(), Listen: fmt.Sprintf("127.0.0.1:%d", testport.Free(t)), SecretFile: secret}
	s := openStore(t, cfg)
	waitLeading(t, s)
	url := "nats://" + cfg.Listen
	for name, opts := range map[string][]nats.Option{"no token": nil, "another token": {nats.Token(strings.Repeat("x", 40))}} {
		if nc, err := nats.Connect(url, opts...); err == nil {
			nc.Close()
			t.Errorf("a client with %s connected", name)
		} else if !strings.Contains(strings.ToLower(err.Error()), "authorization") {
			t.Errorf("a client with %s: %v, want an authorization error", name, err)
		}
	}
	nc, err := nats.Connect(url, nats.Token(token))
	if err != nil {
		t.Fatalf("a client with the secret: %v", err)
	}
	nc.Close()

	// The routes of a cluster member: a server routing to it without the
	// secret gets none; one with it does.
	route := fmt.Sprintf("127.0.0.1:%d", testport.Free(t))
	member, err := startEmbedded(Config{Name: "default", Dir: t.TempDir(), ClusterListen: route}.withDefaults(), token)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { member.Shutdown(); member.WaitForShutdown() })
	peer := func(name, routeURL string, cluster server.ClusterOpts) *server.Server {
		cluster.Name, cluster.Host, cluster.Port = "trellis-default", "127.0.0.1", testport.Free(t)
		return startServer(t, &server.Options{ServerName: name, Host: "127.0.0.1", Port: -1, NoSigs: true, NoLog: true,
			Cluster: cluster, Routes: server.RoutesFromStr(routeURL)})
	}
	intruder := peer("intruder", "nats-route://"+route, server.ClusterOpts{})
	friend := peer("friend", "nats-route://"+clusterUser+":"+token+"@"+route, server.ClusterOpts{Username: clusterUser, Password: token})
	deadline := time.Now().Add(10 * time.Second)
	for friend.NumRoutes() == 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if friend.NumRoutes() == 0 {
		t.Fatal("a server with the secret got no route to the member")
	}
	time.Sleep(time.Second) // the intruder, started first, has tried by now; give it more
	// Sampled over a second: a route attempt being refused counts for a
	// moment (seen once with eight runs of this package at a time); a route
	// the member took would count in every sample.
	routed := 0
	for range 10 {
		if intruder.NumRoutes() != 0 {
			routed++
		}
		time.Sleep(100 * time.Millisecond)
	}
	if routed > 5 {
		t.Fatalf("a server without the secret had a route in %d of 10 samples over a second", routed)
	}

	short := filepath.Join(t.TempDir(), "short")
	if err := os.WriteFile(short, []byte("too short"), 0o600); err != nil {
		t.Fatal(err)
	}
	for file, want := range map[string]string{short: "at least 32", filepath.Join(t.TempDir(), "missing"): "no such file"} {
		bad := cfg
		bad.Dir, bad.SecretFile = t.TempDir(), file
		if st, err := Open(context.Background(), bad); err == nil || !strings.Contains(err.Error(), want) {
			if st != nil {
				st.Close()
			}
			t.Errorf("opening with secret file %s: %v, want an error saying %q", file, err, want)
		}
	}
}
