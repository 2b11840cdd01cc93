package storepg_test

import (
	"net/url"
	"testing"
	"time"

	"github.com/trellis-dev/trellis/internal/pgtest"
	"github.com/trellis-dev/trellis/internal/pgtest/pgstore"
	"github.com/trellis-dev/trellis/internal/s3test"
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
	s3test.RunPayloads(t, func(t *testing.T, now func() time.Time, blobsURL string) *storepg.Store {
		return pgstore.Open(t, pgtest.SchemaURL(t)+"&blob_threshold=100000&blobs="+url.QueryEscape(blobsURL), now)
	}, storepg.BlobRows)
}

func TestPayloadsBadSettings(t *testing.T) {
	base := pgtest.URL(t)
	for _, u := range []string{base + "&blob_threshold=10", base + "&blob_threshold=x"} {
		if _, err := storepg.ParseURL(u); err == nil {
			t.Errorf("ParseURL(%s) accepted a bad threshold", u)
		}
	}
}
