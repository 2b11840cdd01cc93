package storejs

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
)

// Durability settings of the JetStream servers a store starts.
const (
	// DurabilityFsync: every JetStream server the store embeds syncs each
	// write to disk before acknowledging it (sync_interval: always). The
	// default.
	DurabilityFsync = "fsync"
	// DurabilityRelaxed: JetStream's own default, a sync every two minutes; a
	// machine that loses power may lose acknowledged writes. Not for
	// production.
	DurabilityRelaxed = "relaxed"
)

// Config configures a Store.
type Config struct {
	// Name is the cluster's name: its log is stream TRELLIS_<Name>, its
	// lease bucket TRELLIS_<Name>_LEADER. Letters, digits, '-' and '_', at
	// most 64; default "default".
	Name string
	// Dir is where an embedded NATS server keeps its data (Dir/nats) and
	// where the replica is by default (Dir/replica.db). Required for an
	// embedded server.
	Dir string
	// Replica is the replica's SQLite file. Default Dir/replica.db, or
	// trellis-<Name>.replica.db in the working directory with Servers.
	Replica string
	// Servers are the URLs of an existing NATS cluster's servers; empty: the
	// store embeds a NATS server.
	Servers []string
	// Creds is a NATS credentials file for Servers.
	Creds string
	// Replicas is how many copies JetStream keeps of the log (1 or 3, at
	// most 5); default 1.
	Replicas int
	// Durability of an embedded server: DurabilityFsync (default) or
	// DurabilityRelaxed.
	Durability string
	// Listen, for an embedded server, is the address its clients may connect
	// to ("": none; the store connects in-process).
	Listen string
	// ClusterListen and Routes form a cluster of embedded servers: the
	// address this one takes routes on and the route URLs of the others
	// (nats-route://host:port). ServerName names this server in the cluster
	// (default: derived from ClusterListen).
	ClusterListen string
	Routes        []string
	ServerName    string
	// SecretFile, for an embedded server, is a file holding the secret
	// (at least 32 characters; surrounding white space is dropped) that the
	// servers of a cluster present to each other on their routes and that
	// NATS clients present as their token. Required with Listen or
	// ClusterListen: without it anyone reaching those ports could read and
	// write the log, around every Trellis grant.
	SecretFile string
	// LeaseDuration is how long the writer's lease lasts unrenewed: how soon
	// another server takes over writing from one that stopped. Default
	// DefaultLeaseDuration.
	LeaseDuration time.Duration
	// SnapshotEvery is how many log records the writer appends between two
	// snapshots of its replica (TRELLIS_<Name>_SNAPSHOTS); default
	// DefaultSnapshotEvery, negative: none by count.
	SnapshotEvery int
	// SnapshotInterval is the longest time between two snapshots while the
	// log moves; default DefaultSnapshotInterval, negative: none by time.
	SnapshotInterval time.Duration
	// CompactMargin is how many records before the newest snapshot the log
	// keeps at least when it is compacted after a snapshot; default
	// DefaultCompactMargin, negative: the log is never compacted.
	CompactMargin int
	// Now is the store's clock (default time.Now).
	Now func() time.Time
	// Logger receives the store's errors (default: discard).
	Logger *slog.Logger
	// Conn, when set, is used instead of Servers or an embedded server (the
	// store does not close it).
	Conn *nats.Conn
}

var nameRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

func (c Config) validate() error {
	var errs []error
	if c.Name != "" && !nameRE.MatchString(c.Name) {
		errs = append(errs, fmt.Errorf("cluster name %q: letters, digits, '-' and '_' only, at most 64", c.Name))
	}
	if c.Replicas < 0 || c.Replicas > 5 {
		errs = append(errs, fmt.Errorf("replicas %d: 1 to 5", c.Replicas))
	}
	if c.Durability != "" && c.Durability != DurabilityFsync && c.Durability != DurabilityRelaxed {
		errs = append(errs, fmt.Errorf("durability %q: %s or %s", c.Durability, DurabilityFsync, DurabilityRelaxed))
	}
	embedded := len(c.Servers) == 0 && c.Conn == nil
	if embedded && c.Dir == "" {
		errs = append(errs, errors.New("an embedded server needs a data directory"))
	}
	if !embedded && (c.Listen != "" || c.ClusterListen != "" || len(c.Routes) > 0 || c.SecretFile != "") {
		errs = append(errs, errors.New("listen, cluster_listen, routes and secret are settings of an embedded server"))
	}
	if embedded && (c.Listen != "" || c.ClusterListen != "") && c.SecretFile == "" {
		errs = append(errs, errors.New("listen and cluster_listen need secret=FILE, a file holding the secret the cluster's servers and NATS clients present (at least 32 characters): without it anyone reaching those ports could read and write the log"))
	}
	if len(c.Routes) > 0 && c.ClusterListen == "" {
		errs = append(errs, errors.New("routes need cluster_listen, the address this server takes routes on"))
	}
	for _, a := range []string{c.Listen, c.ClusterListen} {
		if a == "" {
			continue
		}
		if _, _, err := net.SplitHostPort(a); err != nil {
			errs = append(errs, fmt.Errorf("address %q: %w", a, err))
		}
	}
	for _, r := range c.Routes {
		if u, err := url.Parse(r); err != nil || u.Scheme != "nats-route" || u.Host == "" {
			errs = append(errs, fmt.Errorf("route %q: want nats-route://host:port", r))
		}
	}
	if c.LeaseDuration < 0 {
		errs = append(errs, fmt.Errorf("lease %s: must be positive", c.LeaseDuration))
	}
	return errors.Join(errs...)
}

func (c Config) withDefaults() Config {
	if c.Name == "" {
		c.Name = "default"
	}
	if c.Replicas == 0 {
		c.Replicas = 1
	}
	if c.Durability == "" {
		c.Durability = DurabilityFsync
	}
	if c.LeaseDuration == 0 {
		c.LeaseDuration = DefaultLeaseDuration
	}
	if c.SnapshotEvery == 0 {
		c.SnapshotEvery = DefaultSnapshotEvery
	}
	if c.SnapshotInterval == 0 {
		c.SnapshotInterval = DefaultSnapshotInterval
	}
	if c.CompactMargin == 0 {
		c.CompactMargin = DefaultCompactMargin
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if c.Dir == "" {
		c.Dir = "."
	}
	return c
}

func (c Config) replicaPath() string {
	switch {
	case c.Replica != "":
		return c.Replica
	case len(c.Servers) > 0 || c.Conn != nil:
		return filepath.Join(c.Dir, "trellis-"+c.Name+".replica.db")
	}
	return filepath.Join(c.Dir, "replica.db")
}

// ParseURL parses a store URL:
//
//	jetstream:///var/lib/trellis[?name=N&replicas=R&durability=relaxed&listen=ADDR
//	          &cluster_listen=ADDR&routes=nats-route://h2:6222,nats-route://h3:6222
//	          &server_name=S&secret=FILE&replica=FILE&lease=3s&snapshot_every=N&snapshot_interval=1h
//	          &compact_margin=N]
//	nats://h1:4222,h2:4222,h3:4222/NAME[?replicas=R&creds=FILE&replica=FILE&lease=3s
//	          &snapshot_every=N&snapshot_interval=1h&compact_margin=N]
//
// snapshot_every, snapshot_interval and compact_margin also take "off".
//
// The first embeds a NATS server whose data is under the path; the second
// uses an existing cluster, whose log stream is TRELLIS_NAME.
func ParseURL(raw string) (Config, error) {
	var c Config
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok {
		return c, fmt.Errorf("store URL %q: want jetstream:///DIR or nats://HOST[,HOST...]/NAME", raw)
	}
	rest, query, _ := strings.Cut(rest, "?")
	q, err := url.ParseQuery(query)
	if err != nil {
		return c, fmt.Errorf("store URL %q: %w", raw, err)
	}
	switch strings.ToLower(scheme) {
	case "jetstream":
		if !strings.HasPrefix(rest, "/") {
			return c, fmt.Errorf("store URL %q: want jetstream:///ABSOLUTE/DIR (three slashes)", raw)
		}
		c.Dir = rest
	case "nats":
		hosts, name, _ := strings.Cut(rest, "/")
		if hosts == "" {
			return c, fmt.Errorf("store URL %q: no NATS server", raw)
		}
		for _, h := range strings.Split(hosts, ",") {
			c.Servers = append(c.Servers, "nats://"+h)
		}
		c.Name = name
		if c.Name == "" {
			c.Name = "default"
		}
	default:
		return c, fmt.Errorf("store URL %q: scheme %q is not jetstream or nats", raw, scheme)
	}
	for key, vals := range q {
		v := vals[len(vals)-1]
		switch key {
		case "name":
			if len(c.Servers) > 0 {
				return c, fmt.Errorf("store URL %q: the cluster's name is the URL's path with nats://", raw)
			}
			c.Name = v
		case "replicas":
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 {
				return c, fmt.Errorf("store URL %q: replicas=%q: want a number from 1 to 5", raw, v)
			}
			c.Replicas = n
		case "durability":
			c.Durability = v
		case "listen":
			c.Listen = v
		case "cluster_listen":
			c.ClusterListen = v
		case "routes":
			c.Routes = strings.Split(v, ",")
		case "server_name":
			c.ServerName = v
		case "secret":
			c.SecretFile = v
		case "replica":
			c.Replica = v
		case "creds":
			c.Creds = v
		case "lease":
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 {
				return c, fmt.Errorf("store URL %q: lease=%q: want a duration such as 3s", raw, v)
			}
			c.LeaseDuration = d
		case "snapshot_every", "compact_margin":
			n, err := offOrCount(v)
			if err != nil {
				return c, fmt.Errorf("store URL %q: %s=%q: %w", raw, key, v, err)
			}
			if key == "snapshot_every" {
				c.SnapshotEvery = n
			} else {
				c.CompactMargin = n
			}
		case "snapshot_interval":
			if v == "off" {
				c.SnapshotInterval = -1
				break
			}
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 {
				return c, fmt.Errorf("store URL %q: snapshot_interval=%q: want a duration such as 1h, or off", raw, v)
			}
			c.SnapshotInterval = d
		default:
			return c, fmt.Errorf("store URL %q: unknown parameter %q", raw, key)
		}
	}
	if err := c.validate(); err != nil {
		return c, fmt.Errorf("store URL %q: %w", raw, err)
	}
	return c, nil
}

// offOrCount parses a count of records of the URL (a positive number, or
// "off": -1).
func offOrCount(v string) (int, error) {
	if v == "off" {
		return -1, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		return 0, errors.New("want a number of records from 1, or off")
	}
	return n, nil
}

// minSecret is the shortest secret an embedded server takes.
const minSecret = 32

// readSecret reads the secret of cfg.SecretFile ("" when none is set).
func readSecret(file string) (string, error) {
	if file == "" {
		return "", nil
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("secret: %w", err)
	}
	secret := strings.TrimSpace(string(b))
	if len(secret) < minSecret {
		return "", fmt.Errorf("secret: %s holds %d characters, want at least %d (openssl rand -hex 32)", file, len(secret), minSecret)
	}
	return secret, nil
}
