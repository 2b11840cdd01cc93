package storesqlite

import (
	"strings"
	"testing"
)

func TestParseURL(t *testing.T) {
	t.Parallel()
	good := []struct {
		url  string
		want Config
	}{
		{"sqlite:///var/lib/trellis/trellis.db", Config{Path: "/var/lib/trellis/trellis.db"}},
		{"sqlite:///tmp/t.db?durability=relaxed", Config{Path: "/tmp/t.db", Durability: DurabilityRelaxed}},
		{"sqlite:///tmp/t.db?durability=fsync&max_batch=32", Config{Path: "/tmp/t.db", Durability: DurabilityFsync, MaxBatch: 32}},
		{"sqlite:data/trellis.db", Config{Path: "data/trellis.db"}},
		{"sqlite:trellis.db?durability=relaxed", Config{Path: "trellis.db", Durability: DurabilityRelaxed}},
		{"sqlite://./rel.db", Config{Path: "./rel.db"}},
		{"sqlite:///tmp/with%20space.db", Config{Path: "/tmp/with space.db"}},
		{"sqlite:///tmp/seed%230/t.db", Config{Path: "/tmp/seed#0/t.db"}},
		{"sqlite:///tmp/t.db?wal_limit=1048576", Config{Path: "/tmp/t.db", WALLimit: 1 << 20}},
		{"sqlite:///tmp/t.db?wal_preallocate=4194304", Config{Path: "/tmp/t.db", WALPreallocate: 4 << 20}},
		{"sqlite:///tmp/t.db?wal_preallocate=0", Config{Path: "/tmp/t.db"}},
		{"sqlite:///tmp/t.db?disk_reserve=1048576", Config{Path: "/tmp/t.db", DiskReserve: 1 << 20}},
		{"sqlite:///tmp/t.db?disk_reserve=0", Config{Path: "/tmp/t.db", DiskReserve: -1}},
	}
	for _, tc := range good {
		got, err := ParseURL(tc.url)
		if err != nil {
			t.Errorf("ParseURL(%q): %v", tc.url, err)
			continue
		}
		if got.Path != tc.want.Path || got.Durability != tc.want.Durability || got.MaxBatch != tc.want.MaxBatch ||
			got.WALLimit != tc.want.WALLimit || got.WALPreallocate != tc.want.WALPreallocate {
			t.Errorf("ParseURL(%q) = %+v, want %+v", tc.url, got, tc.want)
		}
	}
	bad := []struct{ url, wantErr string }{
		{"postgres:///tmp/t.db", "scheme"},
		{"sqlite://", "path"},
		{"sqlite:///", "path"},
		{"sqlite://host/t.db", "host"},
		{"sqlite:///tmp/t.db?durability=sometimes", "Durability"},
		{"sqlite:///tmp/t.db?max_batch=0", "max_batch"},
		{"sqlite:///tmp/t.db?max_batch=x", "max_batch"},
		{"sqlite:///tmp/t.db?cache=shared&zeta=1", "cache, zeta"},
		{"sqlite:///tmp/t.db?durability=fsync&durability=relaxed", "durability"},
		{"sqlite:///tmp/t.db?wal_limit=0", "wal_limit"},
		{"sqlite:///tmp/t.db?wal_limit=1MiB", "wal_limit"},
		{"sqlite:///tmp/t.db?wal_preallocate=-1", "wal_preallocate"},
		{"sqlite:///tmp/t.db?wal_preallocate=64MiB", "wal_preallocate"},
		{"sqlite:///tmp/t.db?disk_reserve=-1", "disk_reserve"},
		{"sqlite:///tmp/t.db?disk_reserve=32MiB", "disk_reserve"},
		{"sqlite:///tmp/t.db?durability=relaxed;max_batch=2", "semicolon"},
		{"sqlite:///tmp/t.db?durability=%zz", "parameters"},
		{"::", "parsing"},
		{"sqlite:///tmp/seed#0/t.db", "'#' in the path must be written %23"},
		{"sqlite:///tmp/t.db#", "'#'"},
	}
	for _, tc := range bad {
		if _, err := ParseURL(tc.url); err == nil || !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("ParseURL(%q) error = %v, want one mentioning %q", tc.url, err, tc.wantErr)
		}
	}
}

// URL escapes what a path may hold, and ParseURL reads the path back.
func TestURLOfPath(t *testing.T) {
	t.Parallel()
	for _, p := range []string{"/tmp/t.db", "/tmp/seed#0/t.db", "/tmp/100%/a b.db", "rel/t.db", "rel/#1/t.db"} {
		cfg, err := ParseURL(URL(p))
		if err != nil || cfg.Path != p {
			t.Errorf("ParseURL(URL(%q)) = %q, %v", p, cfg.Path, err)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	cases := []struct {
		cfg     Config
		wantErr string
	}{
		{Config{Path: "/tmp/x.db"}, ""},
		{Config{}, "Config.Path"},
		{Config{Path: ":memory:"}, "Config.Path"},
		{Config{Path: "/tmp/x.db?mode=ro"}, "Config.Path"},
		{Config{Path: "/tmp/x.db", Durability: "never"}, "Config.Durability"},
		{Config{Path: "/tmp/x.db", MaxBatch: -1}, "Config.MaxBatch"},
		{Config{Path: "/tmp/x.db", WALLimit: -1}, "Config.WALLimit"},
		{Config{Path: "/tmp/x.db", WALPreallocate: -1}, "Config.WALPreallocate"},
	}
	for _, tc := range cases {
		err := tc.cfg.withDefaults().validate()
		switch {
		case tc.wantErr == "" && err != nil:
			t.Errorf("validate(%+v): %v", tc.cfg, err)
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("validate(%+v) = %v, want an error naming %s", tc.cfg, err, tc.wantErr)
		}
	}
	d := Config{Path: "x"}.withDefaults()
	if d.Durability != DurabilityFsync || d.MaxBatch != DefaultMaxBatch || d.WALLimit != DefaultWALLimit || d.Now == nil || d.Logger == nil {
		t.Errorf("withDefaults = %+v", d)
	}
}
