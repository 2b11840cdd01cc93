package storepg_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-dev/trellis/internal/pgtest"
	"github.com/trellis-dev/trellis/internal/pgtest/pgstore"
	"github.com/trellis-dev/trellis/store"
	"github.com/trellis-dev/trellis/store/storepg"
)

// silentServer accepts TCP connections and never answers; it stops at cleanup.
func silentServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		conns []net.Conn
		done  = make(chan struct{})
	)
	go func() { // owned by the test: ends when the listener closes
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return ln.Addr().String()
}

// Open on a server that accepts connections and never answers fails after the
// connect timeout, even with a context that has no deadline.
func TestOpenTimesOutOnASilentServer(t *testing.T) {
	t.Parallel()
	addr := silentServer(t)
	for _, tc := range []struct {
		name string
		cfg  storepg.Config
	}{
		{"ConfigTimeout", storepg.Config{URL: "postgres://u@" + addr + "/db?sslmode=disable", ConnectTimeout: 200 * time.Millisecond}},
		{"URLTimeout", storepg.Config{URL: "postgres://u@" + addr + "/db?sslmode=disable&connect_timeout=1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			errc := make(chan error, 1)
			go func() {
				s, err := storepg.Open(context.Background(), tc.cfg)
				if err == nil {
					s.Close()
				}
				errc <- err
			}()
			select {
			case err := <-errc:
				if err == nil {
					t.Fatal("Open on a silent server succeeded")
				}
			case <-time.After(30 * time.Second):
				t.Fatal("Open on a silent server still waits after 30s")
			}
		})
	}
}

func TestConnectTimeoutDefaults(t *testing.T) {
	t.Parallel()
	for url, want := range map[string]time.Duration{
		"postgres://u@h/db":                   storepg.DefaultConnectTimeout,
		"postgres://u@h/db?connect_timeout=3": 3 * time.Second,
	} {
		cfg, err := storepg.ParseURL(url)
		if err != nil {
			t.Fatal(err)
		}
		if got := storepg.ConnectTimeoutOf(t, cfg); got != want {
			t.Errorf("connect timeout of %s = %v, want %v", url, got, want)
		}
	}
}

func TestParseURLRejectsMalformedParameters(t *testing.T) {
	t.Parallel()
	for _, bad := range []string{"postgres://h/db?schema=a;b", "postgres://h/db?schema=%zz"} {
		if cfg, err := storepg.ParseURL(bad); err == nil {
			t.Errorf("ParseURL(%q) = schema %q, want an error", bad, cfg.Schema)
		}
	}
}

// NoMigrate opens an existing, migrated schema, and fails with ErrNoStore,
// creating nothing, when the schema is missing.
func TestOpenNoMigrate(t *testing.T) {
	t.Parallel()
	url := pgtest.SchemaURL(t)
	cfg, err := storepg.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.NoMigrate = true
	_, err = storepg.Open(context.Background(), cfg)
	if !errors.Is(err, store.ErrNoStore) || !strings.Contains(err.Error(), "no Trellis store at schema "+cfg.Schema) {
		t.Fatalf("Open(NoMigrate) of a missing schema: %v, want ErrNoStore", err)
	}
	if schemaExists(t, cfg.Schema) {
		t.Fatalf("Open(NoMigrate) created schema %s", cfg.Schema)
	}
	pgstore.Open(t, url, nil) // migrates
	s, err := storepg.Open(context.Background(), cfg)
	if err != nil {
		t.Fatalf("Open(NoMigrate) of a migrated schema: %v", err)
	}
	s.Close()
}

func schemaExists(t *testing.T, schema string) bool {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var n int
	if err := conn.QueryRow(t.Context(), `SELECT count(*) FROM information_schema.schemata WHERE schema_name = $1`,
		schema).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n > 0
}
