package storejs

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/trellis-dev/trellis/store"
	"github.com/trellis-dev/trellis/store/storetest"
)

// The whole suite on one JetStream server (R1, syncing every write), each
// case on a stream of its own; the transactional cases skip: the store does
// not offer them. (The embedded server of jetstream: URLs is the same server
// in-process: the rebuild, corruption and sync tests open it.)
func TestConformance(t *testing.T) {
	if raceEnabled {
		// Ten times slower under the race detector (100 s); CI runs it in its
		// run without the detector, and the tests of the store's own
		// goroutines (following, forwarding, fencing) run under it.
		t.Skip("the whole suite under the race detector")
	}
	srv := startNATS(t, t.TempDir())
	var n atomic.Int64
	storetest.Run(t, func(t *testing.T, now func() time.Time) store.Store {
		s := openStore(t, Config{Conn: connectTo(t, srv), Name: fmt.Sprint("case", n.Add(1)),
			Replica: t.TempDir() + "/replica.db", Now: now})
		waitLeading(t, s)
		return view(s)
	})
}

// The whole suite on a cluster of three JetStream servers with three copies
// of every log (R3); each case has a stream of its own, and its store
// connects to one of the three in turn.
func TestConformanceR3(t *testing.T) {
	if testing.Short() || raceEnabled {
		// As TestConformance.
		t.Skip("a three-server cluster")
	}
	servers := startCluster(t, 3)
	var n atomic.Int64
	storetest.Run(t, func(t *testing.T, now func() time.Time) store.Store {
		i := n.Add(1)
		s, err := Open(context.Background(), Config{Conn: connectTo(t, servers[i%3]), Name: fmt.Sprint("case", i),
			Replica: t.TempDir() + "/replica.db", Replicas: 3, Now: now})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		waitLeading(t, s)
		return view(s)
	})
}
