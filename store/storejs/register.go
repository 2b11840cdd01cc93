package storejs

import (
	"context"
	"fmt"

	"github.com/trellis-dev/trellis/store"
)

// init registers the driver for "jetstream:" and "nats:" URLs (store.Open,
// trellis.Open): a program opens such stores by importing this package.
func init() {
	open := func(ctx context.Context, url string, opts store.OpenOptions) (store.Store, error) {
		cfg, err := ParseURL(url)
		if err != nil {
			return nil, err
		}
		if opts.NoMigrate {
			// A replica is a cache of the log: opening one creates and fills it,
			// which a tool that only looks must not do unasked.
			return nil, fmt.Errorf("%w: a %s store is read through a trellis server (--server), not opened by a tool", store.ErrNoStore, url)
		}
		cfg.Now = opts.Now
		if opts.Logger != nil {
			cfg.Logger = opts.Logger.With("store", "jetstream")
		}
		s, err := Open(ctx, cfg)
		if err != nil {
			return nil, err // not a nil *Store in a non-nil interface
		}
		return s, nil
	}
	store.Register("jetstream", open)
	store.Register("nats", open)
}
