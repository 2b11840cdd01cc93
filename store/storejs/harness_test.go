package storejs

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/trellis-dev/trellis/internal/testport"
)

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
	errs := &errLog{}
	s.SetLogger(errs, false, false)
	go s.Start()
	if !s.ReadyForConnections(30 * time.Second) {
		s.Shutdown()
		t.Fatalf("nats server not ready in 30s; its errors: %s", errs)
	}
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	return s
}

// errLog keeps a server's errors (its logger is otherwise silent), for a
// test that fails on the server to say why.
type errLog struct {
	mu   sync.Mutex
	errs []string
}

func (l *errLog) add(format string, v ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.errs = append(l.errs, fmt.Sprintf(format, v...))
}

func (l *errLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.errs) == 0 {
		return "none"
	}
	return strings.Join(l.errs, "; ")
}

func (l *errLog) Fatalf(format string, v ...any) { l.add(format, v...) }
func (l *errLog) Errorf(format string, v ...any) { l.add(format, v...) }
func (*errLog) Noticef(string, ...any)           {}
func (*errLog) Warnf(string, ...any)             {}
func (*errLog) Debugf(string, ...any)            {}
func (*errLog) Tracef(string, ...any)            {}

// startCluster starts n JetStream servers in this process forming one
// cluster, and waits until it has a meta leader.
func startCluster(t testing.TB, n int) []*server.Server {
	t.Helper()
	ports := make([]int, n)
	for i := range ports {
		ports[i] = testport.Free(t)
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

// createPlacedLog creates the log's stream of cluster "default" as openLog
// does, with three replicas on the servers tagged tag, waiting for the
// cluster's meta leader.
func createPlacedLog(t *testing.T, js jetstream.JetStream, tag string) jetstream.Stream {
	t.Helper()
	ctx := context.Background()
	st, err := retryOpen(ctx, func() (jetstream.Stream, error) {
		return js.CreateStream(ctx, jetstream.StreamConfig{Name: streamName("default"), Subjects: []string{logSubject("default")},
			Storage: jetstream.FileStorage, Replicas: 3, Discard: jetstream.DiscardNew, Duplicates: duplicateWindow, DenyDelete: true,
			Placement: &jetstream.Placement{Tags: []string{tag}}})
	})
	if err != nil {
		t.Fatal(err)
	}
	return st
}
