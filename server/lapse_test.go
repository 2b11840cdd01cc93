package server

import (
	"context"
	"testing"
	"time"

	"connectrpc.com/connect"
	pb "github.com/trellis-dev/trellis/internal/gen/trellis/worker/v1"
	"github.com/trellis-dev/trellis/store"
	"google.golang.org/protobuf/types/known/durationpb"
)

// readClaims is a claim stream read aside: each message as it comes, then
// the stream's end.
type readClaims struct {
	msgs  chan *pb.ClaimResponse
	ended chan error
}

func openClaim(ctx context.Context, e *env, worker string, credit int64, lease, wait time.Duration) *readClaims {
	cs := &readClaims{msgs: make(chan *pb.ClaimResponse, 100), ended: make(chan error, 1)}
	go func() {
		s, err := e.workerClient("worker").Claim(ctx, connect.NewRequest(&pb.ClaimRequest{Namespace: "default",
			Workflows: []string{"handed"}, Worker: worker, Credit: credit,
			LeaseDuration: durationpb.New(lease), Wait: durationpb.New(wait)}))
		if err != nil {
			cs.ended <- err
			return
		}
		defer s.Close()
		for s.Receive() {
			cs.msgs <- s.Msg()
		}
		cs.ended <- s.Err()
	}()
	return cs
}

// A worker that lets a lease lapse (it stops heartbeating, as a SIGSTOPped
// process does) has its claim stream ended with reconnect, and the run is
// never pushed back down that stream; a stream the worker opens after the
// lapse (it is back) may claim it again; a worker that heartbeats keeps its
// stream. The process test (a live worker takes the runs over) is cmd/trellis
// TestFrozenRemoteWorker.
func TestLapsedLeaseEndsClaimStream(t *testing.T) {
	for name, url := range storeURLs(t) {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, url(t))
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			const lease = time.Second
			frozen := openClaim(ctx, e, "frozen", 2, lease, 30*time.Second)
			offered(t, e.srv, 2)
			run := e.start("handed", 1, nil)
			m := <-frozen.msgs
			if len(m.Runs) != 1 || m.Runs[0].Run.Id != run.ID {
				t.Fatalf("pushed %v, want run %s", m.Runs, run.ID)
			}
			// The frozen worker heartbeats once, then no more. The lease's
			// expiry as this server counts it is no later than the store's:
			// at the store's expiry the stream sees the lapse before it
			// claims, rather than claiming the run again (a claim no worker
			// sees, counted in the run's attempts) and handing it back.
			if _, err := e.workerClient("worker").ExtendLeases(ctx, connect.NewRequest(&pb.ExtendLeasesRequest{
				Leases: []*pb.Lease{leaseOf(m.Runs[0])}, Duration: durationpb.New(lease)})); err != nil {
				t.Fatal(err)
			}
			r, err := e.st.RunGet(ctx, &store.RunGetParams{Namespace: "default", Ref: run.ID})
			if err != nil {
				t.Fatal(err)
			}
			e.srv.leases.mu.Lock()
			counted := e.srv.leases.held[leaseRun{"default", run.ID}].expires
			e.srv.leases.mu.Unlock()
			if r.LeaseExpiresAt == nil || counted.After(*r.LeaseExpiresAt) {
				t.Fatalf("the server counts the extended lease until %v, the store until %v", counted, r.LeaseExpiresAt)
			}
			timeout := time.After(lease + 5*claimRecheck)
			for done := false; !done; {
				select {
				case m := <-frozen.msgs:
					if len(m.Runs) > 0 {
						t.Fatalf("the stream of the worker that let the lease lapse was pushed %v", m.Runs)
					}
					if !m.Reconnect {
						t.Fatalf("the stream ended with %v, want reconnect", m)
					}
				case err := <-frozen.ended:
					if err != nil {
						t.Fatal(err)
					}
					done = true
				case <-timeout:
					t.Fatalf("the stream of the worker that let its lease lapse is still open")
				}
			}

			// Back (it opens a new stream after the lapse), the worker is
			// live: the run may go to it again.
			back := openClaim(ctx, e, "frozen", 1, time.Minute, 30*time.Second)
			select {
			case m := <-back.msgs:
				if len(m.Runs) != 1 || m.Runs[0].Run.Id != run.ID || m.Runs[0].Run.Attempts != 2 {
					t.Fatalf("the worker back got %v, want run %s, claimed a second time", m.Runs, run.ID)
				}
			case err := <-back.ended:
				t.Fatalf("the stream of the worker back ended: %v", err)
			}

			// A worker that heartbeats through the same lease keeps its stream.
			alive := openClaim(ctx, e, "alive", 2, lease, 30*time.Second)
			offered(t, e.srv, 2)
			run2 := e.start("handed", 2, nil)
			m = <-alive.msgs
			if len(m.Runs) != 1 || m.Runs[0].Run.Id != run2.ID {
				t.Fatalf("pushed %v, want run %s", m.Runs, run2.ID)
			}
			cr := m.Runs[0]
			l := leaseOf(cr)
			for range 12 { // four leases
				res, err := e.workerClient("worker").ExtendLeases(ctx, connect.NewRequest(&pb.ExtendLeasesRequest{
					Leases: []*pb.Lease{l}, Duration: durationpb.New(lease)}))
				if err != nil || len(res.Msg.Lost) > 0 {
					t.Fatalf("extending: %v, %v", res, err)
				}
				select {
				case m := <-alive.msgs:
					t.Fatalf("the stream of a heartbeating worker got %v", m)
				case err := <-alive.ended:
					t.Fatalf("the stream of a heartbeating worker ended: %v", err)
				case <-time.After(lease / 3):
				}
			}
		})
	}
}
