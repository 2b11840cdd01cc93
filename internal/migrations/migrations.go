// Package migrations reads the numbered schema migrations a storage driver
// embeds ("NNNN_name.sql"); each driver applies them its own way.
package migrations

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/trellis-dev/trellis/store"
)

// Migration is one numbered schema change.
type Migration struct {
	Version int
	Name    string
	SQL     string
}

// Load returns the migrations in dir of fsys ("NNNN_name.sql", NNNN > 0, no
// version twice), in version order.
func Load(fsys fs.FS, dir string) ([]Migration, error) {
	files, err := fs.Glob(fsys, path.Join(dir, "*.sql"))
	if err != nil {
		return nil, err
	}
	var ms []Migration
	for _, f := range files {
		base := strings.TrimSuffix(path.Base(f), ".sql")
		num, name, _ := strings.Cut(base, "_")
		v, err := strconv.Atoi(num)
		if err != nil || v <= 0 {
			return nil, fmt.Errorf("migration %s: name must start with a positive number", f)
		}
		b, err := fs.ReadFile(fsys, f)
		if err != nil {
			return nil, err
		}
		ms = append(ms, Migration{Version: v, Name: name, SQL: string(b)})
	}
	slices.SortFunc(ms, func(a, b Migration) int { return a.Version - b.Version })
	for i := 1; i < len(ms); i++ {
		if ms[i].Version == ms[i-1].Version {
			return nil, fmt.Errorf("migration version %d is used twice", ms[i].Version)
		}
	}
	return ms, nil
}

// RequireCurrent checks a store opened without migrating: current is the highest
// version recorded in its schema_migrations table (0 when it has none), where
// names it in the error. It returns an error wrapping store.ErrNoStore unless the
// store has every migration of ms (a newer store is accepted).
func RequireCurrent(where string, current int, ms []Migration) error {
	if len(ms) == 0 {
		return errors.New("no migrations embedded")
	}
	latest := ms[len(ms)-1].Version
	switch {
	case current == 0:
		return fmt.Errorf("%w at %s (trellis migrate creates one)", store.ErrNoStore, where)
	case current < latest:
		return fmt.Errorf("%w at %s: it is at schema version %d of %d (trellis migrate upgrades it)",
			store.ErrNoStore, where, current, latest)
	}
	return nil
}
