package storejs

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// embeddedMaxPayload is the largest message of an embedded server.
const embeddedMaxPayload = 32 << 20

// connect connects to cfg's NATS servers, or starts the embedded one and
// connects to it in-process.
func connect(ctx context.Context, cfg Config) (*nats.Conn, *server.Server, error) {
	if cfg.Conn != nil {
		return cfg.Conn, nil, nil
	}
	opts := []nats.Option{nats.Name("trellis"), nats.MaxReconnects(-1), nats.ReconnectWait(250 * time.Millisecond)}
	if len(cfg.Servers) > 0 {
		if cfg.Creds != "" {
			opts = append(opts, nats.UserCredentials(cfg.Creds))
		}
		nc, err := nats.Connect(strings.Join(cfg.Servers, ","), opts...)
		if err != nil {
			return nil, nil, fmt.Errorf("connecting to %s: %w", strings.Join(cfg.Servers, ","), err)
		}
		return nc, nil, nil
	}
	secret, err := readSecret(cfg.SecretFile)
	if err != nil {
		return nil, nil, err
	}
	srv, err := startEmbedded(cfg, secret)
	if err != nil {
		return nil, nil, err
	}
	if secret != "" {
		opts = append(opts, nats.Token(secret))
	}
	nc, err := nats.Connect("", append(opts, nats.InProcessServer(srv))...)
	if err != nil {
		srv.Shutdown()
		return nil, nil, fmt.Errorf("connecting to the embedded NATS server: %w", err)
	}
	return nc, srv, nil
}

// clusterUser is the user name the servers of an embedded cluster present on
// their routes, with the cluster's secret as password.
const clusterUser = "trellis"

// startEmbedded starts the NATS server a jetstream: store embeds, with
// JetStream's data under cfg.Dir/nats and, unless cfg.Durability is
// relaxed, every write synced before it is acknowledged.
func startEmbedded(cfg Config, secret string) (*server.Server, error) {
	opts := &server.Options{
		ServerName: cfg.ServerName,
		JetStream:  true,
		StoreDir:   filepath.Join(cfg.Dir, "nats"),
		SyncAlways: cfg.Durability != DurabilityRelaxed,
		NoSigs:     true,
		NoLog:      true,
		// nats-server starts routing only once its client listener is open:
		// without one a cluster's servers never formed it and the store never
		// opened. A cluster member listens on a loopback port the system
		// chooses unless Listen names one; a single server listens on none
		// (the store connects in-process).
		DontListen: cfg.Listen == "" && cfg.ClusterListen == "",
		Host:       "127.0.0.1",
		Port:       server.RANDOM_PORT,
		// A follower forwards each write to the writer as one message: a
		// checkpoint or a batch of starts may carry several payloads of up to
		// the server's payload limit (2 MiB by default).
		MaxPayload: embeddedMaxPayload,
	}
	if cfg.Listen != "" {
		host, port, err := hostPort(cfg.Listen)
		if err != nil {
			return nil, fmt.Errorf("listen=%s: %w", cfg.Listen, err)
		}
		opts.Host, opts.Port = host, port
	}
	if cfg.ClusterListen != "" {
		host, port, err := hostPort(cfg.ClusterListen)
		if err != nil {
			return nil, fmt.Errorf("cluster_listen=%s: %w", cfg.ClusterListen, err)
		}
		opts.Cluster = server.ClusterOpts{Name: "trellis-" + cfg.Name, Host: host, Port: port}
		opts.Routes = server.RoutesFromStr(strings.Join(cfg.Routes, ","))
		if secret != "" {
			// Routes, both ways, carry the cluster's secret.
			opts.Cluster.Username, opts.Cluster.Password = clusterUser, secret
			for _, r := range opts.Routes {
				r.User = url.UserPassword(clusterUser, secret)
			}
		}
		if opts.ServerName == "" {
			opts.ServerName = "trellis-" + cfg.Name + "-" + strings.ReplaceAll(cfg.ClusterListen, ":", "-")
		}
	}
	if secret != "" {
		opts.Authorization = secret // NATS clients' token
	}
	srv, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("starting the embedded NATS server: %w", err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(30 * time.Second) {
		srv.Shutdown()
		return nil, errors.New("starting the embedded NATS server: not ready after 30s")
	}
	return srv, nil
}

func hostPort(addr string) (string, int, error) {
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, err
	}
	port, err := strconv.Atoi(p)
	if err != nil {
		return "", 0, fmt.Errorf("port %q", p)
	}
	return host, port, nil
}
