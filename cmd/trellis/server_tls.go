package main

import (
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"syscall"

	"github.com/trellis-dev/trellis/server"
)

// serverTLSFlags are the flags of `trellis server` for TLS and mutual TLS
// (docs/security.md, "TLS and mutual TLS"); --trusted-proxy is with the caps
// (serverLimits).
type serverTLSFlags struct {
	cert, key, clientCA string
}

func (t *serverTLSFlags) add(fs *flag.FlagSet) {
	fs.StringVar(&t.cert, "tls-cert", "", "serve HTTPS with this PEM certificate chain `file` (with --tls-key; reloaded on SIGHUP)")
	fs.StringVar(&t.key, "tls-key", "", "the PEM private key `file` of --tls-cert")
	fs.StringVar(&t.clientCA, "client-ca", "", "mutual TLS: verify client certificates against the PEM CA certificates of this `file`;\na certificate's subject acts as the token created with it (tokens create --subject)")
}

// reloadTLSOnSIGHUP reloads the server's TLS files on each SIGHUP until the
// returned function is called (a server without TLS listens for none). A
// reload is told on stdout; a failed one keeps the pair in use and is logged.
func reloadTLSOnSIGHUP(srv *server.Server, stdout io.Writer, logger *slog.Logger) (stop func()) {
	if !srv.TLS() {
		return func() {}
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-hup:
				if err := srv.ReloadTLS(); err != nil {
					logger.Error("SIGHUP: reloading TLS failed", "err", err)
				} else {
					fmt.Fprintln(stdout, "SIGHUP: reloaded the TLS certificate, key and client CA")
				}
			case <-done:
				return
			}
		}
	}()
	return func() {
		signal.Stop(hup)
		close(done)
		wg.Wait()
	}
}
