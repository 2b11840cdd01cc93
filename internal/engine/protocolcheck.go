package engine

import (
	"github.com/trellis-dev/trellis/internal/protocol"
	"github.com/trellis-dev/trellis/store"
)

// ProtocolViolation, when set, makes the engine check every checkpoint it
// writes against the worker protocol's rules (internal/protocol.Check, with
// the run's history as the execution knows it) before the store sees it, and
// call it with those that break a rule; the checkpoint is written all the
// same. The Go engine is one implementation of the protocol: the tests of the
// root package set it and fail on any violation, so every behaviour they
// exercise is held to the rules a server enforces on workers in other
// languages. Nil (production): nothing is checked. Set it before any engine
// runs, never while one does.
var ProtocolViolation func(run *store.Run, p *store.CheckpointParams, err error)

// checkProtocol checks p against the rules when ProtocolViolation is set; rec
// is what the run recorded before p (nil: the rules that need it are skipped).
func checkProtocol(run *store.Run, rec *protocol.Recorded, p *store.CheckpointParams) {
	if ProtocolViolation == nil {
		return
	}
	if err := protocol.Check(p, rec); err != nil {
		ProtocolViolation(run, p, err)
	}
}
