package storepg_test

import (
	"net/url"
	"testing"
	"time"

	"github.com/trellis-dev/trellis/internal/pgtest"
	"github.com/trellis-dev/trellis/internal/pgtest/pgstore"
	"github.com/trellis-dev/trellis/internal/s3test"
	"github.com/trellis-dev/trellis/store"
	"github.com/trellis-dev/trellis/store/blobs"
	"github.com/trellis-dev/trellis/store/blobs/s3blobs"
	"github.com/trellis-dev/trellis/store/storepg"
	"github.com/trellis-dev/trellis/store/storetest"
)

// Payloads above the threshold go to the table blobs, and away with their
// runs.
func TestPayloadsApartTable(t *testing.T) {
	s := pgstore.OpenReused(t, nil)
	storetest.PayloadsApart(t, s, func() int { return storepg.BlobRows(t, s) })
}

func TestPayloadLookingLikeReference(t *testing.T) {
	s := pgstore.OpenReused(t, nil)
	storetest.PayloadLookingLikeReference(t, s)
}

// With an object store: the payload cases of the conformance suite, and
// nothing left in the bucket after a purge.
func TestPayloadsS3(t *testing.T) {
	srv := s3test.Start(t)
	open := func(t *testing.T, now func() time.Time, prefix string) *storepg.Store {
		return pgstore.Open(t, pgtest.SchemaURL(t)+"&blob_threshold=100000&blobs="+url.QueryEscape(srv.URL("payloads", prefix)), now)
	}
	t.Run("Conformance", func(t *testing.T) {
		storetest.RunPayloads(t, func(t *testing.T, now func() time.Time) store.Store {
			return open(t, now, "conf/"+t.Name())
		})
	})
	t.Run("Apart", func(t *testing.T) {
		s := open(t, nil, "apart")
		if s.Payloads().Threshold() != 100000 {
			t.Fatalf("threshold %d, want the URL's 100000", s.Payloads().Threshold())
		}
		b, err := blobs.Open(t.Context(), srv.URL("payloads", "apart"))
		if err != nil {
			t.Fatal(err)
		}
		storetest.PayloadsApart(t, s, func() int {
			n, err := b.(*s3blobs.Backend).Count(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			if rows := storepg.BlobRows(t, s); rows != 0 {
				t.Fatalf("%d payloads in the table with an object store", rows)
			}
			return n
		})
	})
}

func TestPayloadsBadSettings(t *testing.T) {
	base := pgtest.URL(t)
	for _, u := range []string{base + "&blob_threshold=10", base + "&blob_threshold=x"} {
		if _, err := storepg.ParseURL(u); err == nil {
			t.Errorf("ParseURL(%s) accepted a bad threshold", u)
		}
	}
}
