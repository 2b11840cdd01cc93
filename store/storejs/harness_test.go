package storejs

import (
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// freePort returns a loopback port nothing listens on now.
func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// startNATS starts one JetStream server with per-write fsync, listening on
// a loopback port, stopped at the test's end.
func startNATS(t testing.TB, dir string) *server.Server {
	t.Helper()
	return startServer(t, &server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: dir, SyncAlways: true, NoSigs: true, NoLog: true})
}

func startServer(t testing.TB, opts *server.Options) *server.Server {
	t.Helper()
	s, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(30 * time.Second) {
		t.Fatal("nats server not ready")
	}
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	return s
}

// startCluster starts n JetStream servers in this process forming one
// cluster, and waits until it has a meta leader.
func startCluster(t testing.TB, n int) []*server.Server {
	t.Helper()
	ports := make([]int, n)
	for i := range ports {
		ports[i] = freePort(t)
	}
	var routes []string
	for _, p := range ports {
		routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", p))
	}
	dir := t.TempDir()
	servers := make([]*server.Server, n)
	for i := range servers {
		servers[i] = startServer(t, &server.Options{
			ServerName: fmt.Sprintf("n%d", i+1), Host: "127.0.0.1", Port: -1, JetStream: true,
			StoreDir: filepath.Join(dir, fmt.Sprint(i)), SyncAlways: true, NoSigs: true, NoLog: true,
			Cluster: server.ClusterOpts{Name: "test", Host: "127.0.0.1", Port: ports[i]},
			Routes:  server.RoutesFromStr(strings.Join(routes, ",")),
		})
	}
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		for _, s := range servers {
			if s.JetStreamIsLeader() {
				return servers
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatal("the cluster elected no JetStream meta leader in 30s")
	return nil
}

func connectTo(t testing.TB, s *server.Server) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// writerAndFollower opens two stores on one log of a JetStream server
// (leases of an hour: nothing changes hands unasked): a, the writer, and b,
// which follows; before runs on a before b opens.
func writerAndFollower(t *testing.T, before func(a *Store)) (a, b *Store) {
	t.Helper()
	srv := startNATS(t, t.TempDir())
	dir := t.TempDir()
	a = openStore(t, Config{Conn: connectTo(t, srv), Replica: filepath.Join(dir, "a.db"), LeaseDuration: time.Hour})
	waitLeading(t, a)
	if before != nil {
		before(a)
	}
	b = openStore(t, Config{Conn: connectTo(t, srv), Replica: filepath.Join(dir, "b.db"), LeaseDuration: time.Hour})
	return a, b
}
