package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/trellis-dev/trellis"
)

// runMigrate creates a store or brings its schema up to date. Migrations run when a
// store is opened, so this opens the store and closes it; running it again is a no-op.
func runMigrate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("migrate", "migrate --store URL",
		"Create the store if it is missing and apply its pending schema migrations.", stderr)
	var url string
	storeFlag(fs, &url)
	pos, err := parseArgs(fs, args)
	switch {
	case err != nil:
		return err
	case len(pos) > 0:
		return usagef(fs, "migrate: unexpected argument %q", pos[0])
	}
	if err := requireStore(fs, &url); err != nil {
		return err
	}
	s, err := trellis.OpenStore(ctx, url, time.Now)
	if err != nil {
		return fmt.Errorf("migrating %s: %w", url, err)
	}
	if err := s.Close(); err != nil {
		return fmt.Errorf("closing %s: %w", url, err)
	}
	fmt.Fprintf(stdout, "migrated %s\n", url)
	return nil
}
