package storejs_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that no goroutine outlives the tests, but for these, none
// of which holds anything of ours:
//
//   - one of nats.go's: the jetstream package starts
//     resetPendingAcksOnReconnect for a connection's first asynchronous reply
//     and it waits on the connection's reconnect channel, which is nil once
//     the connection closed, so it never ends (nats.go v1.55.0,
//     jetstream/publish.go);
//   - two of nats-server's, of a stream whose creation a server's shutdown
//     met: the stream's file store is set up before the stream is entered in
//     its account (server/stream.go, addStreamWithAssignmentAndMode), and a
//     shutdown that lists the account's streams in between never stops it,
//     leaving its flush loop and the access-time ticker the store registered
//     (nats-server v2.15.2). The cluster tests create R3 streams, which the
//     other servers create on their own time, and stop within seconds; CI's
//     race step, on a loaded machine, met it twice in this package. A store
//     that left its embedded server running would leave many other server
//     goroutines, which are still caught.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("github.com/nats-io/nats.go/jetstream.(*jetStream).resetPendingAcksOnReconnect"),
		goleak.IgnoreTopFunction("github.com/nats-io/nats-server/v2/server.(*fileStore).flushStreamStateLoop"),
		goleak.IgnoreTopFunction("github.com/nats-io/nats-server/v2/server/ats.Register.func1"))
}
