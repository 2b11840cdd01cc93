// Command natscluster runs a NATS cluster of JetStream servers in one
// process, each syncing every write (sync_interval: always), until it is
// interrupted: the "existing cluster" of the JetStream store's benchmarks and
// trials (docs/jetstream.md), from the module's own nats-server.
//
//	go run ./store/storejs/internal/natscluster -n 3 -port 4301 -dir /tmp/natscluster
//	trellis bench --store 'nats://127.0.0.1:4301,127.0.0.1:4302,127.0.0.1:4303/bench?replicas=3&replica=/tmp/r3.db' --workload w1
package main

import (
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

func main() {
	n := flag.Int("n", 3, "servers")
	port := flag.Int("port", 4301, "the first server's client port (the others follow; route ports are 1000 above)")
	dir := flag.String("dir", filepath.Join(os.TempDir(), "natscluster"), "data directory")
	flag.Parse()
	var routes []string
	for i := range *n {
		routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", *port+1000+i))
	}
	var servers []*server.Server
	for i := range *n {
		s, err := server.NewServer(&server.Options{
			ServerName: fmt.Sprintf("n%d", i+1), Host: "127.0.0.1", Port: *port + i,
			JetStream: true, StoreDir: filepath.Join(*dir, fmt.Sprint(i+1)), SyncAlways: true, NoSigs: true,
			Cluster: server.ClusterOpts{Name: "natscluster", Host: "127.0.0.1", Port: *port + 1000 + i},
			Routes:  server.RoutesFromStr(strings.Join(routes, ",")),
		})
		if err != nil {
			log.Fatal(err)
		}
		go s.Start()
		if !s.ReadyForConnections(30 * time.Second) {
			log.Fatalf("server %d not ready", i+1)
		}
		servers = append(servers, s)
	}
	fmt.Printf("%d JetStream servers on 127.0.0.1:%d-%d (sync always), data in %s\n", *n, *port, *port+*n-1, *dir)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	<-sig
	for _, s := range servers {
		s.Shutdown()
	}
}
