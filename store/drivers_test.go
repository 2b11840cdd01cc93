package store

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// testDriver registers scheme for the test and removes it at cleanup.
func testDriver(t *testing.T, scheme string, open OpenFunc) {
	t.Helper()
	Register(scheme, open)
	t.Cleanup(func() {
		drivers.mu.Lock()
		delete(drivers.byName, scheme)
		drivers.mu.Unlock()
	})
}

// No driver is imported in this package's tests: a Trellis scheme's error
// names the import that registers it.
func TestOpenWithoutDriverNamesTheImport(t *testing.T) {
	for url, want := range map[string]string{
		"postgres://u:secret@h:5432/db?schema=s": `no store driver for "postgres://": import _ "github.com/trellis-dev/trellis/store/storepg"`,
		"postgresql://h/db":                      `no store driver for "postgresql://": import _ "github.com/trellis-dev/trellis/store/storepg"`,
		"sqlite:trellis.db":                      `no store driver for "sqlite:": import _ "github.com/trellis-dev/trellis/store/storesqlite"`,
	} {
		s, err := Open(t.Context(), url, OpenOptions{})
		if s != nil || err == nil || err.Error() != want {
			t.Errorf("Open(%q) = %v, %v; want the error %s", url, s, err, want)
		}
		if err != nil && strings.Contains(err.Error(), "secret") {
			t.Errorf("Open(%q): the error shows the password: %v", url, err)
		}
	}
}

func TestOpenUnknownAndMalformed(t *testing.T) {
	testDriver(t, "memtest", func(context.Context, string, OpenOptions) (Store, error) { return nil, errors.New("unused") })
	_, err := Open(t.Context(), "mysql://h/db", OpenOptions{})
	if err == nil || err.Error() != `no store driver for "mysql://" (registered: memtest)` {
		t.Errorf("unknown scheme: %v", err)
	}
	for _, url := range []string{"", "trellis.db", "/abs/trellis.db", ":x", "1db:x"} {
		if _, err := Open(t.Context(), url, OpenOptions{}); err == nil || !strings.Contains(err.Error(), "not a store URL") {
			t.Errorf("Open(%q) = %v; want not a store URL", url, err)
		}
	}
}

// Open hands the registered driver the URL and the options as given; the
// scheme matches whatever its case.
func TestOpenCallsTheDriver(t *testing.T) {
	type call struct {
		url  string
		opts OpenOptions
	}
	var got []call
	fail := errors.New("driver's error")
	testDriver(t, "memtest", func(_ context.Context, url string, opts OpenOptions) (Store, error) {
		got = append(got, call{url, opts})
		return nil, fail
	})
	now := func() time.Time { return time.Unix(1, 0) }
	if _, err := Open(t.Context(), "MemTest://x?y=1", OpenOptions{Now: now, NoMigrate: true}); !errors.Is(err, fail) {
		t.Fatalf("Open = %v; want the driver's error", err)
	}
	if len(got) != 1 || got[0].url != "MemTest://x?y=1" || !got[0].opts.NoMigrate || !got[0].opts.Now().Equal(now()) {
		t.Fatalf("driver called with %+v", got)
	}
	if ds := Drivers(); len(ds) != 1 || ds[0] != "memtest" {
		t.Errorf("Drivers() = %v; want [memtest]", ds)
	}
}

func TestRegisterRefusesMistakes(t *testing.T) {
	open := func(context.Context, string, OpenOptions) (Store, error) { return nil, nil }
	testDriver(t, "memtest", open)
	for name, f := range map[string]func(){
		"twice":       func() { Register("memtest", open) },
		"twice, case": func() { Register("MEMTEST", open) },
		"empty":       func() { Register("", open) },
		"not scheme":  func() { Register("mem test", open) },
		"with colon":  func() { Register("memtest2:", open) },
		"nil":         func() { Register("memtest3", nil) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Register %s: no panic", name)
				}
			}()
			f()
		}()
	}
	if ds := Drivers(); len(ds) != 1 {
		t.Errorf("Drivers() = %v after refused registrations; want only memtest", ds)
	}
}
