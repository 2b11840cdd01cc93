// Package forward carries the JetStream store's writes from a follower to the
// leader over NATS request/reply.
//
// A follower's replica serves reads; every write goes to the one server whose
// replica writes the log. The leader answers with Serve, a queue subscription
// that runs each request in its own goroutine (at most MaxInFlight at once); a
// follower calls Client.Call, which sends the method name and its parameters,
// decodes the result, turns the leader's error back into the store sentinel it
// names (errors.Is keeps working across the hop), and then waits until its own
// replica has applied the log up to the sequence the leader answered with, so
// that a caller reads its own writes.
//
// Parameters and results travel in this package's own JSON encoding (Marshal,
// Unmarshal), not encoding/json's: the store's records hide fields from their
// HTTP form with `json:"-"` (idempotency records, lease secrets, per-item
// errors) that a forwarded write must keep. See codec.go.
//
// Outcomes: no leader at the moment (nobody subscribed, or the server asked
// answers "not_leader") is retried with a short backoff for up to NoLeaderWait,
// then fails with ErrNoLeader; nothing was written. A request that times out, or
// whose context ends while the leader works on it, fails with ErrOutcomeUnknown:
// the write may have been applied.
package forward
