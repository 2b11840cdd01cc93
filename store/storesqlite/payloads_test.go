package storesqlite_test

import (
	"context"
	neturl "net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/trellis-dev/trellis/internal/s3test"
	"github.com/trellis-dev/trellis/store/storesqlite"
	"github.com/trellis-dev/trellis/store/storetest"
)

// Payloads above the threshold go to the table blobs, and away with their
// runs.
func TestPayloadsApartTable(t *testing.T) {
	s, err := storesqlite.Open(context.Background(), storesqlite.Config{Path: filepath.Join(t.TempDir(), "t.db")})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	storetest.PayloadsApart(t, s, func() int { return storesqlite.BlobRows(t, s) })
}

func TestPayloadLookingLikeReference(t *testing.T) {
	s, err := storesqlite.Open(context.Background(), storesqlite.Config{Path: filepath.Join(t.TempDir(), "t.db")})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	storetest.PayloadLookingLikeReference(t, s)
}

// With an object store: the payload cases of the conformance suite, and
// nothing left in the bucket after a purge.
func TestPayloadsS3(t *testing.T) {
	s3test.RunPayloads(t, func(t *testing.T, now func() time.Time, blobsURL string) *storesqlite.Store {
		cfg, err := storesqlite.ParseURL(storesqlite.URL(filepath.Join(t.TempDir(), "t.db")) +
			"?blob_threshold=100000&blobs=" + urlQueryEscape(blobsURL))
		if err != nil {
			t.Fatal(err)
		}
		cfg.Now = now
		s, err := storesqlite.Open(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}, storesqlite.BlobRows)
}

func TestPayloadsBadSettings(t *testing.T) {
	dir := t.TempDir()
	for _, u := range []string{
		storesqlite.URL(filepath.Join(dir, "a.db")) + "?blob_threshold=10",
		storesqlite.URL(filepath.Join(dir, "a.db")) + "?blob_threshold=x",
	} {
		if _, err := storesqlite.ParseURL(u); err == nil {
			t.Errorf("ParseURL(%s) accepted a bad threshold", u)
		}
	}
	for _, b := range []string{"ftp://x/y", "s3:///nobucket", "s3://b/p?endpoint=127.0.0.1:1&insecure=maybe", "s3://b/p?bogus=1"} {
		cfg := storesqlite.Config{Path: filepath.Join(dir, "b.db"), Blobs: b}
		defer func() {
			if _, err := os.Stat(cfg.Path); err == nil {
				t.Errorf("Open with blobs %q made the store file", b)
			}
		}()
		if s, err := storesqlite.Open(context.Background(), cfg); err == nil {
			s.Close()
			t.Errorf("Open with blobs %q succeeded", b)
		} else {
			t.Logf("blobs %q: %v", b, err)
		}
	}
}

func urlQueryEscape(s string) string { return neturl.QueryEscape(s) }
