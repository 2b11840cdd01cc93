package storepg

import (
	"context"

	"github.com/trellis-dev/trellis/store"
)

// init registers the driver for "postgres://" and "postgresql://" URLs
// (store.Open, trellis.Open). A program that opens a Postgres store by URL
// imports this package for it:
//
//	import _ "github.com/trellis-dev/trellis/store/storepg"
//
// so that a program that does not use Postgres does not link pgx.
func init() {
	open := func(ctx context.Context, url string, opts store.OpenOptions) (store.Store, error) {
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
	}
	store.Register("postgres", open)
	store.Register("postgresql", open)
}
