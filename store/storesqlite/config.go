package storesqlite

import (
	"github.com/trellis-dev/trellis/store/blobs"

	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Durability selects what a commit waits for.
type Durability string

const (
	// DurabilityFsync returns from a write only once it is on disk (WAL with
	// synchronous=FULL). The default.
	DurabilityFsync Durability = "fsync"
	// DurabilityRelaxed (WAL with synchronous=NORMAL) survives a process crash but
	// may lose the last commits on power loss or an OS crash.
	DurabilityRelaxed Durability = "relaxed"
)

// DefaultMaxBatch is the default of Config.MaxBatch.
const DefaultMaxBatch = 256

// DefaultWALLimit is the default of Config.WALLimit.
const DefaultWALLimit = 64 << 20

// Config configures a Store.
type Config struct {
	// Path is the database file; it is created when missing. Required.
	Path string
	// Durability defaults to DurabilityFsync.
	Durability Durability
	// Now is the clock of every time the driver records. Default time.Now.
	Now func() time.Time
	// MaxBatch caps the write requests committed by one transaction. Default 256.
	MaxBatch int
	// Logger receives the writer's errors. Default: discard.
	Logger *slog.Logger
	// WALLimit bounds the write-ahead log, in bytes: past it the writer
	// makes the next write start the WAL over, and the file is
	// truncated back to this size when it is (journal_size_limit). After a failed
	// write (e.g. a full disk) the WAL is emptied. Default 64 MiB.
	WALLimit int64
	// WALPreallocate is how much of the write-ahead log Open writes ahead, as
	// zeros, in bytes (at most WALLimit; 0, the default: none). A commit that
	// appends to the WAL grows the file, and its fsync must then also commit
	// the file's new size to the filesystem's journal; a commit into blocks
	// already written need not (on the test machine 0.22 ms against 0.39 ms).
	// SQLite reuses the WAL's blocks once it starts the WAL over (see WALLimit),
	// so this matters from a store's opening until then. The zeros past the
	// log's end are ignored by SQLite, also in recovery. Best effort: a
	// failure (a full disk) is logged and leaves the WAL as it was.
	WALPreallocate int64
	// DiskReserve is how much of the volume the store keeps for the runs that
	// are running, in bytes: 0, the default, is DefaultDiskReserve; a negative
	// value turns the reserve off. Open holds it in a file beside the database
	// (PATH-reserve, allocated, not written). When the volume is about to fill
	// up, or a write failed on a full disk, the file is given back, so that
	// running runs can checkpoint and the WAL can be copied into the database;
	// meanwhile new runs (RunCreate, RunsCreate, RunCreateTx) are refused with
	// store.ErrStorageFull, until there is room for the reserve again and as
	// much free beside it. Without it, the starts that keep arriving take the
	// space freed on a full disk first, and runs acknowledged before stay
	// running for good (docs/storage.md, "A full disk"). Linux and other
	// Unix systems; elsewhere there is no reserve.
	DiskReserve int64
	// NoMigrate opens an existing store as it is, for tools that only look: Open
	// neither creates the file nor applies migrations, and fails with
	// store.ErrNoStore when the file is missing or is not a fully migrated store.
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
	if c.Durability == "" {
		c.Durability = DurabilityFsync
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.DiskReserve == 0 {
		c.DiskReserve = DefaultDiskReserve
	}
	if c.MaxBatch == 0 {
		c.MaxBatch = DefaultMaxBatch
	}
	if c.WALLimit == 0 {
		c.WALLimit = DefaultWALLimit
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return c
}

func (c Config) validate() error {
	switch {
	case c.Path == "":
		return errors.New("Config.Path is required")
	case c.Path == ":memory:" || strings.HasPrefix(c.Path, "file:"):
		return fmt.Errorf("Config.Path %q: must be a file path (readers and the writer use separate connections)", c.Path)
	case strings.ContainsRune(c.Path, '?'):
		return fmt.Errorf("Config.Path %q: must not contain '?'", c.Path)
	case c.Durability != DurabilityFsync && c.Durability != DurabilityRelaxed:
		return fmt.Errorf("Config.Durability %q: must be %q or %q", c.Durability, DurabilityFsync, DurabilityRelaxed)
	case c.BlobThreshold != 0 && c.BlobThreshold < blobs.MinThreshold:
		return fmt.Errorf("Config.BlobThreshold %d: must be at least %d bytes", c.BlobThreshold, blobs.MinThreshold)
	case c.MaxBatch < 1:
		return fmt.Errorf("Config.MaxBatch %d: must be positive", c.MaxBatch)
	case c.WALLimit < 1:
		return fmt.Errorf("Config.WALLimit %d: must be positive", c.WALLimit)
	case c.WALPreallocate < 0:
		return fmt.Errorf("Config.WALPreallocate %d: must not be negative", c.WALPreallocate)
	}
	return nil
}

// URL returns the store URL of the database file at path (absolute, or
// relative to the working directory), escaped so that ParseURL reads the path
// back whatever it holds ('#', '%', spaces).
func URL(path string) string {
	if filepath.IsAbs(path) {
		return (&url.URL{Scheme: "sqlite", Path: path}).String()
	}
	return "sqlite:" + (&url.URL{Path: path}).EscapedPath()
}

// ParseURL parses a store URL into a Config:
//
//	sqlite:///abs/path/trellis.db   absolute path
//	sqlite:relative/path.db         path relative to the working directory
//	sqlite://./relative/path.db     the same
//
// Query parameters: durability (fsync or relaxed), max_batch, wal_limit and
// wal_preallocate (bytes), blob_threshold (bytes) and blobs (an object store's
// URL, escaped). Any other parameter, or one that cannot be parsed,
// is an error.
func ParseURL(u string) (Config, error) {
	if strings.Contains(u, "#") {
		// A '#' ends a URL's path: sqlite:///tmp/a#b.db would open /tmp/a.
		return Config{}, fmt.Errorf("parsing store URL %q: a '#' in the path must be written %%23 (it would end the path)", u)
	}
	parsed, err := url.Parse(u)
	if err != nil {
		return Config{}, fmt.Errorf("parsing store URL: %w", err)
	}
	if parsed.Scheme != "sqlite" {
		return Config{}, fmt.Errorf("parsing store URL %q: scheme must be sqlite", u)
	}
	path, err := urlPath(parsed)
	if err != nil {
		return Config{}, fmt.Errorf("parsing store URL %q: %w", u, err)
	}
	cfg := Config{Path: path}
	query, err := url.ParseQuery(parsed.RawQuery)
	if err != nil {
		return Config{}, fmt.Errorf("parsing store URL %q: parameters: %w", u, err)
	}
	if err := applyURLQuery(&cfg, query); err != nil {
		return Config{}, fmt.Errorf("parsing store URL %q: %w", u, err)
	}
	if err := cfg.withDefaults().validate(); err != nil {
		return Config{}, fmt.Errorf("parsing store URL %q: %w", u, err)
	}
	return cfg, nil
}

func urlPath(u *url.URL) (string, error) {
	if u.User != nil || u.Port() != "" {
		return "", errors.New("user and port are not allowed")
	}
	var path string
	switch {
	case u.Opaque != "": // sqlite:relative/path
		p, err := url.PathUnescape(u.Opaque)
		if err != nil {
			return "", err
		}
		path = p
	case u.Host == "": // sqlite:///abs/path
		path = u.Path
	case u.Host == "." || u.Host == "..": // sqlite://./relative/path
		path = u.Host + u.Path
	default:
		return "", fmt.Errorf("host %q not allowed: use sqlite:///abs/path or sqlite:relative/path", u.Host)
	}
	if path == "" || strings.HasSuffix(path, "/") {
		return "", errors.New("missing database file path")
	}
	return path, nil
}

func applyURLQuery(cfg *Config, q url.Values) error {
	var unknown []string
	for key, vals := range q {
		if len(vals) != 1 {
			return fmt.Errorf("parameter %s given %d times", key, len(vals))
		}
		switch key {
		case "durability":
			cfg.Durability = Durability(vals[0])
		case "max_batch":
			n, err := strconv.Atoi(vals[0])
			if err != nil || n < 1 {
				return fmt.Errorf("parameter max_batch %q: must be a positive integer", vals[0])
			}
			cfg.MaxBatch = n
		case "wal_limit":
			n, err := strconv.ParseInt(vals[0], 10, 64)
			if err != nil || n < 1 {
				return fmt.Errorf("parameter wal_limit %q: must be a positive number of bytes", vals[0])
			}
			cfg.WALLimit = n
		case "disk_reserve":
			n, err := strconv.ParseInt(vals[0], 10, 64)
			if err != nil || n < 0 {
				return fmt.Errorf("parameter disk_reserve %q: must be a number of bytes, 0 (none) or more", vals[0])
			}
			cfg.DiskReserve = n
			if n == 0 {
				cfg.DiskReserve = -1 // none
			}
		case "wal_preallocate":
			n, err := strconv.ParseInt(vals[0], 10, 64)
			if err != nil || n < 0 {
				return fmt.Errorf("parameter wal_preallocate %q: must be a number of bytes, 0 or more", vals[0])
			}
			cfg.WALPreallocate = n
		case "blob_threshold":
			n, err := strconv.Atoi(vals[0])
			if err != nil || n < blobs.MinThreshold {
				return fmt.Errorf("parameter blob_threshold %q: must be a number of bytes, at least %d", vals[0], blobs.MinThreshold)
			}
			cfg.BlobThreshold = n
		case "blobs":
			cfg.Blobs = vals[0]
		default:
			unknown = append(unknown, key)
		}
	}
	if len(unknown) > 0 {
		slices.Sort(unknown)
		return fmt.Errorf("unknown parameters: %s", strings.Join(unknown, ", "))
	}
	return nil
}
