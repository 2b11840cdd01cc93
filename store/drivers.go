package store

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"
)

// OpenOptions are what Open passes a driver besides the URL.
type OpenOptions struct {
	// Now is the store's clock; nil: the wall clock.
	Now func() time.Time
	// NoMigrate opens the store as it is: the driver creates and migrates
	// nothing, and fails with an error wrapping ErrNoStore when the store is
	// missing or not fully migrated (for tools that only look at it).
	NoMigrate bool
	// Logger receives what a driver has to report outside any call's error
	// (a replicated store's elections, lost connections, refused records);
	// nil: the driver's default (discard).
	Logger *slog.Logger
}

// OpenFunc opens the store named by url, whose scheme is one its driver
// registered.
type OpenFunc func(ctx context.Context, url string, opts OpenOptions) (Store, error)

var drivers struct {
	mu     sync.RWMutex
	byName map[string]OpenFunc
}

// knownDrivers names the package that registers each scheme Trellis ships a
// driver for, for the error of a program that names such a store without
// importing its driver.
var knownDrivers = map[string]string{
	"sqlite":     "github.com/trellis-dev/trellis/store/storesqlite",
	"postgres":   "github.com/trellis-dev/trellis/store/storepg",
	"postgresql": "github.com/trellis-dev/trellis/store/storepg",
	"jetstream":  "github.com/trellis-dev/trellis/store/storejs",
	"nats":       "github.com/trellis-dev/trellis/store/storejs",
}

// Register makes a driver's stores open by URL (Open, and trellis.Open's
// Config.Store) for the URL scheme given, without its "://" or ":" ("sqlite",
// "postgres"). A driver calls it from an init function, so that importing the
// driver's package is what makes its stores available, as database/sql's
// drivers do: the Postgres driver is linked only into programs that import
// it. It panics when the scheme is empty or not a URL scheme, when open is
// nil, and when the scheme is registered twice: those are programming errors.
func Register(scheme string, open OpenFunc) {
	if !validScheme(scheme) {
		panic(fmt.Sprintf("store.Register: %q is not a URL scheme", scheme))
	}
	if open == nil {
		panic("store.Register: nil OpenFunc for scheme " + scheme)
	}
	scheme = strings.ToLower(scheme)
	drivers.mu.Lock()
	defer drivers.mu.Unlock()
	if _, dup := drivers.byName[scheme]; dup {
		panic("store.Register: scheme " + scheme + " registered twice")
	}
	if drivers.byName == nil {
		drivers.byName = make(map[string]OpenFunc)
	}
	drivers.byName[scheme] = open
}

// Drivers returns the registered URL schemes, sorted.
func Drivers() []string {
	drivers.mu.RLock()
	defer drivers.mu.RUnlock()
	names := make([]string, 0, len(drivers.byName))
	for name := range drivers.byName {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

// Open opens the store named by a URL with the driver registered for its
// scheme. A scheme no imported driver registered is an error naming the
// import that registers it, when Trellis ships one:
//
//	no store driver for "postgres://": import _ "github.com/trellis-dev/trellis/store/storepg"
func Open(ctx context.Context, rawURL string, opts OpenOptions) (Store, error) {
	scheme, ok := urlScheme(rawURL)
	if !ok {
		return nil, fmt.Errorf("opening store %q: not a store URL (want sqlite:path or postgres://...)", redactURL(rawURL))
	}
	drivers.mu.RLock()
	open := drivers.byName[scheme]
	drivers.mu.RUnlock()
	if open != nil {
		return open(ctx, rawURL, opts)
	}
	prefix := scheme + ":"
	if strings.HasPrefix(rawURL, scheme+"://") {
		prefix = scheme + "://"
	}
	if pkg, known := knownDrivers[scheme]; known {
		return nil, fmt.Errorf("no store driver for %q: import _ %q", prefix, pkg)
	}
	return nil, fmt.Errorf("no store driver for %q (registered: %s)", prefix, strings.Join(Drivers(), ", "))
}

// urlScheme is the scheme of a URL, lower-cased; ok is false when the text
// has none.
func urlScheme(raw string) (scheme string, ok bool) {
	i := strings.IndexByte(raw, ':')
	if i <= 0 || !validScheme(raw[:i]) {
		return "", false
	}
	return strings.ToLower(raw[:i]), true
}

// validScheme reports whether s is a URL scheme (RFC 3986: a letter, then
// letters, digits, '+', '-', '.').
func validScheme(s string) bool {
	if s == "" {
		return false
	}
	for i, r := range s {
		switch {
		case 'a' <= r && r <= 'z', 'A' <= r && r <= 'Z':
		case i > 0 && ('0' <= r && r <= '9' || r == '+' || r == '-' || r == '.'):
		default:
			return false
		}
	}
	return true
}

// redactURL hides a password in a store URL for error messages.
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "(malformed URL)"
	}
	return u.Redacted()
}
