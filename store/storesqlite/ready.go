package storesqlite

import "context"

// Ready reports whether the store answers and its schema holds every migration
// this binary knows (the server's /readyz). It writes nothing.
func (s *Store) Ready(ctx context.Context) error { return s.requireMigrated(ctx) }
