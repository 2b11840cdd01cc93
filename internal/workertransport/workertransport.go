// Package workertransport is the seam between package trellis and the remote
// worker's transport: NewWorker with Config.Server needs a store that speaks
// a server's worker protocol (package store/storeremote, over Connect), and
// package trellis does not import it, so that a program that never runs a
// remote worker does not link Connect and the protocol's generated code.
// store/storeremote sets New when a program imports it.
package workertransport

import (
	"crypto/tls"
	"sync"

	"github.com/trellis-dev/trellis/store"
)

// Import is the import that registers the transport, for error messages.
const Import = `import _ "github.com/trellis-dev/trellis/store/storeremote"`

// Config is what a remote worker's transport needs from trellis.Config.
type Config struct {
	URL       string // the server's base URL, http:// or https://
	Token     string
	Namespace string
	TLSConfig *tls.Config
}

// Store is the transport's store: the worker role and the worker records,
// closed by the worker.
type Store interface {
	store.WorkerStore
	store.WorkerRegistry
	Close() error
}

// NewFunc opens a transport to the server cfg names.
type NewFunc func(cfg Config) (Store, error)

var (
	mu      sync.RWMutex
	current NewFunc
)

// Register makes fn the remote worker's transport. It panics when called
// twice or with nil: a programming error.
func Register(fn NewFunc) {
	if fn == nil {
		panic("workertransport.Register: nil NewFunc")
	}
	mu.Lock()
	defer mu.Unlock()
	if current != nil {
		panic("workertransport.Register: registered twice")
	}
	current = fn
}

// New is the registered transport; nil when no package registered one.
func New() NewFunc {
	mu.RLock()
	defer mu.RUnlock()
	return current
}
