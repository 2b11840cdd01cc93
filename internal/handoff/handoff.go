// Package handoff is how the HTTP server (package server) offers, to the
// start that creates a run (or a batch start, for each of its runs), a way to create the run already claimed by a
// remote worker whose claim stream on that server waits with free slots. The
// run then starts without a claim of its own: one store write less per run,
// and no claim round trip between the start and the first step. The server
// gives its Offer to the clients of its requests explicitly
// (internal/core.Calls); a client without one changes nothing.
package handoff

import "github.com/trellis-dev/trellis/store"

// Offer finds a free slot for a new run.
type Offer interface {
	// Reserve returns a slot of a waiting claim stream that serves workflow in
	// queue of namespace ns and, when pin is not 0 (a run pinned to a version,
	// store.Run.Pinned), version pin of it; nil when none has one free.
	Reserve(ns, workflow, queue string, pin int) Slot
}

// Slot is one free slot of a claim stream, reserved for one run being created.
type Slot interface {
	// Claim is what the create needs to lease the run to the stream's worker
	// (store.RunCreateParams.Claim).
	Claim() *store.CreateClaim
	// Done ends the reservation: with the run created claimed, its lease goes
	// to the stream (or, when the stream has ended meanwhile, back to the store
	// at once); with nil (the create failed or the store did not honour the
	// claim), the slot is free again. Call it exactly once.
	Done(cr *store.ClaimedRun)
}
