package storejs

import "github.com/trellis-dev/trellis/store"

// view is the store as its users see it.
func view(s *Store) store.Store { return s }
