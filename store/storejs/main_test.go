package storejs_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that no goroutine outlives the tests, but for one of
// nats.go's: the jetstream package starts resetPendingAcksOnReconnect for a
// connection's first asynchronous reply and it waits on the connection's
// reconnect channel, which is nil once the connection closed, so it never
// ends (nats.go v1.55.0, jetstream/publish.go). It holds nothing of ours.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("github.com/nats-io/nats.go/jetstream.(*jetStream).resetPendingAcksOnReconnect"))
}
