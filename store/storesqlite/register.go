package storesqlite

import (
	"context"

	"github.com/trellis-dev/trellis/store"
)

// init registers the driver for "sqlite:" URLs (store.Open, trellis.Open).
// Package trellis imports this package, so an embedded SQLite store needs no
// import of its own.
func init() {
	store.Register("sqlite", func(ctx context.Context, url string, opts store.OpenOptions) (store.Store, error) {
		cfg, err := ParseURL(url)
		if err != nil {
			return nil, err
		}
		cfg.Now, cfg.NoMigrate = opts.Now, opts.NoMigrate
		s, err := Open(ctx, cfg)
		if err != nil {
			return nil, err // not a nil *Store in a non-nil interface
		}
		return s, nil
	})
}
