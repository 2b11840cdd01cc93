package storejs

import (
	"github.com/trellis-dev/trellis/store"
	"github.com/trellis-dev/trellis/store/storesqlite"
)

// view is the store as its users see it (until the generated method set
// lands, the replica's methods: on a writer they are its writes).
type tmpStore struct {
	*storesqlite.Store
	js *Store
}

func (t tmpStore) Close() error { return t.js.Close() }

func view(s *Store) store.Store { return tmpStore{s.rep, s} }
