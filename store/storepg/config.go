package storepg

import (
	"github.com/trellis-dev/trellis/store/blobs"

	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"regexp"
	"strconv"
	"time"
)

// Defaults of Config.
const (
	DefaultSchema       = "trellis"
	DefaultMaxBatch     = 256
	DefaultWriters      = 2
	DefaultMaxConns     = 8
	DefaultWriteTimeout = 30 * time.Second
	// DefaultConnectTimeout bounds making a connection (TCP, TLS, startup) when
	// the URL sets no connect_timeout.
	DefaultConnectTimeout = 10 * time.Second
)

// Config configures a Store.
type Config struct {
	// URL is the pgx connection string (postgres://user@host:port/db?...), without
	// Trellis' own parameters (see ParseURL). Required.
	URL string
	// Schema holds Trellis' tables; it is created when missing. Default "trellis".
	// Lower-case letters, digits and '_', starting with a letter or '_'.
	Schema string
	// Now is the clock of every time the driver records. Default time.Now.
	Now func() time.Time
	// Logger receives the writer's and the listener's errors. Default: discard.
	Logger *slog.Logger
	// MaxBatch caps the write requests committed by one transaction. Default 256.
	MaxBatch int
	// Writers is the number of group-commit writers (each commits its own batches
	// on its own connection). Default 2: one commits while the other collects.
	Writers int
	// MaxConns caps the connection pool (writers, reads, claims' history loads);
	// the listener's connection comes on top. Default 8.
	MaxConns int
	// WriteTimeout bounds one batch's round trip. Default 30s.
	WriteTimeout time.Duration
	// ConnectTimeout bounds making each connection, so that Open fails rather
	// than waits forever on a server that accepts connections and never answers.
	// The URL's connect_timeout, when set, wins. Default 10s.
	ConnectTimeout time.Duration
	// NoMigrate opens an existing store as it is, for tools that only look: Open
	// neither creates the schema nor applies migrations, and fails with
	// store.ErrNoStore when the schema is missing or is not a fully migrated store.
	NoMigrate bool
	// BlobThreshold is the size in bytes above which a payload (input,
	// output, step result, event payload, run-store value) is stored apart from
	// its row (docs/payloads.md). Default blobs.DefaultThreshold (256 KiB); at
	// least blobs.MinThreshold. URL parameter blob_threshold.
	BlobThreshold int
	// Blobs, when set, is the URL of the S3-compatible object store that holds
	// the payloads stored apart (s3://bucket/prefix?endpoint=host:port&...,
	// package store/blobs/s3blobs, which the program must import); by default
	// they are rows of the store's own table blobs. URL parameter blobs.
	Blobs string
}

func (c Config) withDefaults() Config {
	if c.Schema == "" {
		c.Schema = DefaultSchema
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if c.MaxBatch == 0 {
		c.MaxBatch = DefaultMaxBatch
	}
	if c.Writers == 0 {
		c.Writers = DefaultWriters
	}
	if c.MaxConns == 0 {
		c.MaxConns = DefaultMaxConns
	}
	if c.WriteTimeout == 0 {
		c.WriteTimeout = DefaultWriteTimeout
	}
	if c.ConnectTimeout == 0 {
		c.ConnectTimeout = DefaultConnectTimeout
	}
	return c
}

var schemaRE = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

func (c Config) validate() error {
	switch {
	case c.URL == "":
		return errors.New("Config.URL is required")
	case !schemaRE.MatchString(c.Schema):
		return fmt.Errorf("Config.Schema %q: must be 1-63 lower-case letters, digits or '_', not starting with a digit", c.Schema)
	case c.BlobThreshold != 0 && c.BlobThreshold < blobs.MinThreshold:
		return fmt.Errorf("Config.BlobThreshold %d: must be at least %d bytes", c.BlobThreshold, blobs.MinThreshold)
	case c.MaxBatch < 1:
		return fmt.Errorf("Config.MaxBatch %d: must be positive", c.MaxBatch)
	case c.Writers < 1 || c.Writers > 16:
		return fmt.Errorf("Config.Writers %d: must be between 1 and 16", c.Writers)
	case c.MaxConns < c.Writers+1:
		return fmt.Errorf("Config.MaxConns %d: must exceed Config.Writers (%d)", c.MaxConns, c.Writers)
	case c.WriteTimeout < 0:
		return fmt.Errorf("Config.WriteTimeout %v: must not be negative", c.WriteTimeout)
	case c.ConnectTimeout < 0:
		return fmt.Errorf("Config.ConnectTimeout %v: must not be negative", c.ConnectTimeout)
	}
	return nil
}

// ParseURL parses a store URL into a Config:
//
//	postgres://user:pass@host:5432/db?schema=trellis&sslmode=disable
//	postgresql://...
//
// Trellis' own query parameters are schema, max_batch, writers, max_conns,
// blob_threshold and blobs (docs/payloads.md); they
// are removed before the URL is handed to pgx, which interprets the others (an
// unknown one is sent to the server as a run-time parameter, which rejects names
// it does not know). A query that cannot be parsed is an error.
func ParseURL(u string) (Config, error) {
	parsed, err := url.Parse(u)
	if err != nil {
		return Config{}, fmt.Errorf("parsing store URL: %w", err)
	}
	shown := redact(parsed) // as given, before Trellis' parameters are removed
	if parsed.Scheme != "postgres" && parsed.Scheme != "postgresql" {
		return Config{}, fmt.Errorf("parsing store URL %q: scheme must be postgres or postgresql", shown)
	}
	if parsed.Host == "" && parsed.Opaque != "" {
		return Config{}, fmt.Errorf("parsing store URL %q: want postgres://[user@]host[:port]/db", shown)
	}
	var cfg Config
	q, err := url.ParseQuery(parsed.RawQuery)
	if err != nil {
		return Config{}, fmt.Errorf("parsing store URL %q: parameters: %w", shown, err)
	}
	for key, set := range map[string]func(string) error{
		"schema":    func(v string) error { cfg.Schema = v; return nil },
		"max_batch": intParam(&cfg.MaxBatch),
		"writers":   intParam(&cfg.Writers),
		"max_conns": intParam(&cfg.MaxConns),
		"blob_threshold": func(v string) error {
			n, err := strconv.Atoi(v)
			if err != nil || n < blobs.MinThreshold {
				return fmt.Errorf("%q: must be a number of bytes, at least %d", v, blobs.MinThreshold)
			}
			cfg.BlobThreshold = n
			return nil
		},
		"blobs": func(v string) error { cfg.Blobs = v; return nil },
	} {
		vals, ok := q[key]
		if !ok {
			continue
		}
		if len(vals) != 1 {
			return Config{}, fmt.Errorf("parsing store URL %q: parameter %s given %d times", shown, key, len(vals))
		}
		if err := set(vals[0]); err != nil {
			return Config{}, fmt.Errorf("parsing store URL %q: parameter %s: %w", shown, key, err)
		}
		q.Del(key)
	}
	parsed.RawQuery = q.Encode()
	cfg.URL = parsed.String()
	if err := cfg.withDefaults().validate(); err != nil {
		return Config{}, fmt.Errorf("parsing store URL %q: %w", shown, err)
	}
	return cfg, nil
}

func intParam(dst *int) func(string) error {
	return func(v string) error {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return fmt.Errorf("%q: must be a positive integer", v)
		}
		*dst = n
		return nil
	}
}

// redact hides a password in error messages.
func redact(u *url.URL) string { return u.Redacted() }
