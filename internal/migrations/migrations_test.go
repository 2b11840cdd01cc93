package migrations

import (
	"testing"
	"testing/fstest"
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
