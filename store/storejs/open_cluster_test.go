package storejs

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/trellis-dev/trellis/internal/testport"
	"github.com/trellis-dev/trellis/store"
)

// A store opened while its cluster has no JetStream meta leader, the log's
// and the lease's streams keeping their quorum, waits for one to be elected
// to read the log (a consumer is created by the meta leader), instead of
// failing: a `trellis server` restarted right after another was SIGKILLed
// exited with "reading the log from N: context deadline exceeded". The
// replica exists and lags, as a restarted server's does. (A missing one is
// restored first; the snapshot bucket's lookup waits for the election in the
// same way.)
//
// Five servers; the two streams are placed on the first three (tag "log").
// Three servers stop (one of the streams', two others): the meta group has
// two of five, each stream two of three. The store opens; the stopped
// servers come back after 7 s, past the API's 5 s timeout.
func TestOpenWaitsForTheMetaLeader(t *testing.T) {
	if testing.Short() {
		t.Skip("a five-server cluster losing and regaining its meta quorum")
	}
	ctx := context.Background()
	opts := clusterOpts(t, 5)
	tag(opts[:3], "log")
	servers := startServers(t, opts)
	nc := connectTo(t, servers[0])
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	place := &jetstream.Placement{Tags: []string{"log"}}
	createPlacedLog(t, js, "log")
	if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: leaseBucket("default"), History: 1,
		Storage: jetstream.FileStorage, Replicas: 3, Placement: place}); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	a, err := Open(ctx, Config{Conn: nc, Replica: filepath.Join(dir, "a.db"), Replicas: 3})
	if err != nil {
		t.Fatal(err)
	}
	waitLeading(t, a)
	if err := createRun(ctx, view(a), "r0"); err != nil {
		t.Fatal(err)
	}
	// The second server's replica exists and lags: it reads the log to
	// catch up when it opens again (a restarted server).
	bcfg := Config{Conn: connectTo(t, servers[1]), Replica: filepath.Join(dir, "b.db"), Replicas: 3}
	b, err := Open(ctx, bcfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	for i := 1; i < 3; i++ {
		if err := createRun(ctx, view(a), fmt.Sprint("r", i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}

	stopped := []int{2, 3, 4}
	for _, i := range stopped {
		servers[i].Shutdown()
		servers[i].WaitForShutdown()
	}
	restarted := make(chan struct{})
	go func() {
		defer close(restarted)
		time.Sleep(7 * time.Second)
		for _, i := range stopped {
			s, err := server.NewServer(opts[i])
			if err != nil {
				t.Error(err)
				return
			}
			// Start returns once the server enables JetStream, which
			// waits for the cluster; a Shutdown before that raced it
			// (nats-server panicked on a JetStream account not yet set
			// up), so the cleanup waits for it, a while.
			started := make(chan struct{})
			go func() { defer close(started); s.Start() }()
			t.Cleanup(func() {
				select {
				case <-started:
				case <-time.After(30 * time.Second):
				}
				s.Shutdown()
				s.WaitForShutdown()
			})
		}
	}()
	defer func() { <-restarted }()
	b, err = Open(ctx, bcfg)
	if err != nil {
		t.Fatalf("opening a store while the cluster elects its meta leader: %v", err)
	}
	defer b.Close()
	for i := range 3 {
		if _, err := b.RunGet(ctx, &store.RunGetParams{Namespace: "default", Ref: fmt.Sprint("r", i)}); err != nil {
			t.Fatalf("run r%d on the replica opened during the election: %v", i, err)
		}
	}
}

// clusterOpts are the options of n JetStream servers forming one cluster
// on fixed loopback ports (so that a stopped one can start again).
func clusterOpts(t *testing.T, n int) []*server.Options {
	t.Helper()
	var routes []string
	ports := make([]int, n)
	for i := range ports {
		ports[i] = testport.Free(t)
		routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", ports[i]))
	}
	dir := t.TempDir()
	opts := make([]*server.Options, n)
	for i := range opts {
		opts[i] = &server.Options{
			ServerName: fmt.Sprintf("n%d", i+1), Host: "127.0.0.1", Port: testport.Free(t), JetStream: true,
			StoreDir: filepath.Join(dir, fmt.Sprint(i)), SyncAlways: true, NoSigs: true, NoLog: true,
			Cluster: server.ClusterOpts{Name: "test", Host: "127.0.0.1", Port: ports[i]},
			Routes:  server.RoutesFromStr(strings.Join(routes, ",")),
		}
	}
	return opts
}

// tag adds tag to the placement tags of opts.
func tag(opts []*server.Options, tag string) {
	for _, o := range opts {
		o.Tags = append(o.Tags, tag)
	}
}

// startServers starts a server of each of opts, stopped at the test's end.
func startServers(t *testing.T, opts []*server.Options) []*server.Server {
	t.Helper()
	servers := make([]*server.Server, len(opts))
	for i, o := range opts {
		servers[i] = startServer(t, o)
	}
	return servers
}
