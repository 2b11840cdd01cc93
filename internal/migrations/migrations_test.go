package migrations

import (
	"errors"
	"testing"
	"testing/fstest"

	"github.com/trellis-dev/trellis/store"
)

func TestLoad(t *testing.T) {
	ms, err := Load(fstest.MapFS{
		"m/0002_two.sql": {Data: []byte("B")},
		"m/0001_one.sql": {Data: []byte("A")},
		"m/README.md":    {Data: []byte("not a migration")},
	}, "m")
	if err != nil || len(ms) != 2 || ms[0] != (Migration{1, "one", "A"}) || ms[1] != (Migration{2, "two", "B"}) {
		t.Fatalf("Load = %+v, %v", ms, err)
	}
	for name, fsys := range map[string]fstest.MapFS{
		"unnumbered": {"m/init.sql": {}},
		"zero":       {"m/0000_x.sql": {}},
		"twice":      {"m/0001_a.sql": {}, "m/1_b.sql": {}},
	} {
		if _, err := Load(fsys, "m"); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func TestRequireCurrent(t *testing.T) {
	ms := []Migration{{Version: 1}, {Version: 3}}
	for current, wantErr := range map[int]string{
		0: "no Trellis store at here (trellis migrate creates one)",
		1: "no Trellis store at here: it is at schema version 1 of 3 (trellis migrate upgrades it)",
		3: "", 4: "",
	} {
		err := RequireCurrent("here", current, ms)
		switch {
		case wantErr == "" && err != nil:
			t.Errorf("RequireCurrent(%d): %v", current, err)
		case wantErr != "" && (!errors.Is(err, store.ErrNoStore) || err.Error() != wantErr):
			t.Errorf("RequireCurrent(%d) = %v, want %q wrapping ErrNoStore", current, err, wantErr)
		}
	}
}
