// Package s3blobs is the S3-compatible object store backend of payloads
// stored apart (package store/blobs). Importing it registers the scheme s3:
//
//	s3://bucket/prefix?endpoint=host:port&region=...&access_key=...&secret_key=...&insecure=true
//
// endpoint defaults to s3.amazonaws.com; insecure=true speaks plain HTTP (a
// local server); without access_key the credentials come from the
// environment (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, else
// MINIO_ROOT_USER and MINIO_ROOT_PASSWORD). path_style=true addresses the
// bucket in the path, as most servers other than AWS want (the default for an
// endpoint that is an IP address or localhost). create_bucket=true creates the
// bucket when it is missing. A payload is the object
// prefix/namespace/run/sha256; a run's payloads are deleted by listing
// prefix/namespace/run/. See docs/payloads.md.
package s3blobs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/trellis-dev/trellis/store/blobs"
)

func init() { blobs.Register("s3", Open) }

// Backend is a blobs.Backend on a bucket of an S3-compatible object store.
type Backend struct {
	c      *minio.Client
	bucket string
	prefix string // "" or ending in '/'
}

var params = []string{"endpoint", "region", "access_key", "secret_key", "insecure", "path_style", "create_bucket"}

// Open opens the backend of u (see the package comment). It checks that the
// bucket exists (or creates it with create_bucket=true).
func Open(ctx context.Context, u *url.URL) (blobs.Backend, error) {
	shown := blobs.Redact(u.String())
	if u.Host == "" {
		return nil, fmt.Errorf("blobs URL %q: the bucket is missing (s3://bucket/prefix)", shown)
	}
	q := u.Query()
	for k := range q {
		if !slices.Contains(params, k) {
			return nil, fmt.Errorf("blobs URL %q: unknown parameter %q (known: %s)", shown, k, strings.Join(params, ", "))
		}
	}
	flag := func(name string) (bool, error) {
		v := q.Get(name)
		if v == "" {
			return false, nil
		}
		b, err := strconv.ParseBool(v)
		if err != nil {
			return false, fmt.Errorf("blobs URL %q: parameter %s %q: want true or false", shown, name, v)
		}
		return b, nil
	}
	insecure, err := flag("insecure")
	if err != nil {
		return nil, err
	}
	pathStyle, err := flag("path_style")
	if err != nil {
		return nil, err
	}
	create, err := flag("create_bucket")
	if err != nil {
		return nil, err
	}
	endpoint := q.Get("endpoint")
	if endpoint == "" {
		endpoint = "s3.amazonaws.com"
	}
	var creds *credentials.Credentials
	switch ak, sk := q.Get("access_key"), q.Get("secret_key"); {
	case ak != "" && sk != "":
		creds = credentials.NewStaticV4(ak, sk, "")
	case ak != "" || sk != "":
		return nil, fmt.Errorf("blobs URL %q: access_key and secret_key go together", shown)
	default:
		creds = credentials.NewChainCredentials([]credentials.Provider{&credentials.EnvAWS{}, &credentials.EnvMinio{}})
	}
	opts := &minio.Options{Creds: creds, Secure: !insecure, Region: q.Get("region")}
	if pathStyle {
		opts.BucketLookup = minio.BucketLookupPath
	}
	c, err := minio.New(endpoint, opts)
	if err != nil {
		return nil, fmt.Errorf("blobs URL %q: %w", shown, err)
	}
	b := &Backend{c: c, bucket: u.Host, prefix: strings.Trim(u.Path, "/")}
	if b.prefix != "" {
		b.prefix += "/"
	}
	ok, err := c.BucketExists(ctx, b.bucket)
	switch {
	case err != nil:
		return nil, fmt.Errorf("object store %s: bucket %q: %w", endpoint, b.bucket, err)
	case !ok && create:
		err := c.MakeBucket(ctx, b.bucket, minio.MakeBucketOptions{Region: q.Get("region")})
		if code := minio.ToErrorResponse(err).Code; code == "BucketAlreadyExists" || code == "BucketAlreadyOwnedByYou" {
			err = nil // made meanwhile, by another store on the bucket
		}
		if err != nil {
			return nil, fmt.Errorf("object store %s: creating bucket %q: %w", endpoint, b.bucket, err)
		}
	case !ok:
		return nil, fmt.Errorf("object store %s: bucket %q does not exist (create it, or add create_bucket=true)", endpoint, b.bucket)
	}
	return b, nil
}

func (b *Backend) runPrefix(namespace, runID string) string {
	return b.prefix + url.PathEscape(namespace) + "/" + url.PathEscape(runID) + "/"
}

// Put implements blobs.Backend: one PUT (no multipart up to 5 GiB).
func (b *Backend) Put(ctx context.Context, namespace, runID, key string, data []byte) error {
	_, err := b.c.PutObject(ctx, b.bucket, b.runPrefix(namespace, runID)+key, bytes.NewReader(data), int64(len(data)),
		minio.PutObjectOptions{ContentType: "application/octet-stream", PartSize: 5 << 30, DisableMultipart: true})
	return err
}

// Get implements blobs.Backend.
func (b *Backend) Get(ctx context.Context, namespace, runID, key string) ([]byte, error) {
	obj, err := b.c.GetObject(ctx, b.bucket, b.runPrefix(namespace, runID)+key, minio.GetObjectOptions{})
	if err != nil {
		return nil, err
	}
	defer obj.Close()
	data, err := io.ReadAll(obj)
	if err != nil {
		if minio.ToErrorResponse(err).Code == minio.NoSuchKey {
			return nil, fmt.Errorf("%w: object %s", blobs.ErrNotFound, b.runPrefix(namespace, runID)+key)
		}
		return nil, err
	}
	return data, nil
}

// DeleteRuns implements blobs.Backend: it lists each run's objects and
// deletes them.
func (b *Backend) DeleteRuns(ctx context.Context, namespace string, runIDs []string) error {
	for _, id := range runIDs {
		var errs []error
		for obj := range b.c.ListObjects(ctx, b.bucket, minio.ListObjectsOptions{Prefix: b.runPrefix(namespace, id), Recursive: true}) {
			if obj.Err != nil {
				return fmt.Errorf("listing the objects of run %s: %w", id, obj.Err)
			}
			if err := b.c.RemoveObject(ctx, b.bucket, obj.Key, minio.RemoveObjectOptions{}); err != nil {
				errs = append(errs, err)
			}
		}
		if err := errors.Join(errs...); err != nil {
			return fmt.Errorf("deleting the objects of run %s: %w", id, err)
		}
	}
	return nil
}

// Close implements blobs.Backend.
func (b *Backend) Close() error { return nil }

// Count counts the objects under the backend's prefix (tests check that a
// purge leaves none).
func (b *Backend) Count(ctx context.Context) (int, error) {
	n := 0
	for obj := range b.c.ListObjects(ctx, b.bucket, minio.ListObjectsOptions{Prefix: b.prefix, Recursive: true}) {
		if obj.Err != nil {
			return n, obj.Err
		}
		n++
	}
	return n, nil
}
