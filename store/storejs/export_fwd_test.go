package storejs

import "github.com/trellis-dev/trellis/store/storesqlite"

// NewOverReplica is a Store that writes the replica rep alone (no log, no
// NATS): its reads and writes are rep's, through the generated methods.
func NewOverReplica(rep *storesqlite.Store) *Store { return &Store{rep: rep, leading: true} }

// ServeForwarded is the leader's dispatch of forwarded writes.
var ServeForwarded = (*Store).serveForwarded

// ForwardedMethods are the writes a follower forwards.
func ForwardedMethods() []string {
	var names []string
	for n := range forwarded {
		names = append(names, n)
	}
	return names
}
