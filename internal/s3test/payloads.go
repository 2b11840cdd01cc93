package s3test

import (
	"testing"
	"time"

	"github.com/trellis-dev/trellis/store"
	"github.com/trellis-dev/trellis/store/blobs"
	"github.com/trellis-dev/trellis/store/blobs/s3blobs"
	"github.com/trellis-dev/trellis/store/storetest"
)

// RunPayloads runs the payload cases of the store conformance suite
// (storetest) with a driver's payloads in an object store (an S3-compatible
// server in process), then checks that the store keeps big payloads in the
// bucket, none in its table (tableRows), and deletes them with their runs. open opens a fresh store with its threshold
// at 100000 bytes and blobsURL as its object store.
func RunPayloads[S interface {
	store.Store
	Payloads() *blobs.Payloads
}](t *testing.T, open func(t *testing.T, now func() time.Time, blobsURL string) S, tableRows func(t testing.TB, s S) int) {
	srv := Start(t)
	t.Run("Conformance", func(t *testing.T) {
		storetest.RunPayloads(t, func(t *testing.T, now func() time.Time) store.Store {
			return open(t, now, srv.URL("payloads", "conf/"+t.Name()))
		})
	})
	t.Run("Apart", func(t *testing.T) {
		s := open(t, nil, srv.URL("payloads", "apart"))
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
			if rows := tableRows(t, s); rows != 0 {
				t.Fatalf("%d payloads in the table with an object store", rows)
			}
			return n
		})
	})
}
