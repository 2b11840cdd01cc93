// Package s3test starts an S3-compatible object store for tests: gofakes3
// (github.com/johannesboyne/gofakes3, an in-process S3 implementation with
// an in-memory backend) served over HTTP on a real TCP port of 127.0.0.1, so
// that the store's S3 client (minio-go) speaks the S3 protocol to it over the
// network as it would to any other server. (SeaweedFS' weed was tried first:
// building it did not finish within the few minutes CI can spare, see
// docs/payloads.md.)
package s3test

import (
	"net"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
)

// Server is a running object store.
type Server struct {
	// Endpoint is host:port.
	Endpoint string
}

// Start starts an object store that stops when the test ends.
func Start(t testing.TB) *Server {
	t.Helper()
	faker := gofakes3.New(s3mem.New())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("s3test: listening: %v", err)
	}
	srv := &http.Server{Handler: faker.Server(), ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln) // until Close
	}()
	t.Cleanup(func() {
		_ = srv.Close()
		<-done
	})
	return &Server{Endpoint: ln.Addr().String()}
}

// URL is a blobs URL (a store URL's blobs parameter, the server's --blobs) of
// bucket and prefix on s, which creates the bucket when it is missing.
func (s *Server) URL(bucket, prefix string) string {
	q := url.Values{"endpoint": {s.Endpoint}, "insecure": {"true"}, "path_style": {"true"},
		"access_key": {"test"}, "secret_key": {"test-secret"}, "create_bucket": {"true"}}
	return (&url.URL{Scheme: "s3", Host: bucket, Path: "/" + prefix, RawQuery: q.Encode()}).String()
}
