// Package testport gives tests loopback ports for servers that must listen on
// a port known before they start (cluster routes, a process restarted on the
// address it had).
//
// A port the kernel handed out for ":0" and that was closed again may be taken
// by anything before the server binds it: another test's ":0", or the local
// end of an outgoing connection, which the kernel picks from the same
// ephemeral range. CI runs many processes that connect (Postgres, HTTP,
// NATS), and a JetStream server whose port was taken that way never became
// ready. So Free picks from the ports just below the ephemeral range, which
// the kernel gives to nobody unasked, and checks that nothing listens there.
//
// Test processes running at once (CI runs several packages side by side) pick
// from the same ports, so a pick is also reserved: a file named after the port
// in a directory of the system's temporary directory, created exclusively and
// removed when the test ends. A reservation whose process is gone is taken
// over. (Without it, two processes that picked one port in the same second
// both found it free, and the second server failed to bind.)
package testport

import (
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// span is how many ports below the ephemeral range Free picks from.
const span = 16384

// Free returns a loopback port nothing listens on now, outside the kernel's
// ephemeral range where it can, reserved against the other test processes
// until t ends.
func Free(t testing.TB) int {
	t.Helper()
	lo := ephemeralLow()
	first := max(1024, lo-span)
	if lo-first >= 1024 {
		dir := filepath.Join(os.TempDir(), "trellis-testport")
		if err := os.MkdirAll(dir, 0o777); err != nil {
			t.Fatalf("testport: %v", err)
		}
		for range 200 {
			p := first + rand.IntN(lo-first)
			release, ok := reserve(dir, p)
			if !ok {
				continue
			}
			if l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p))); err == nil {
				l.Close()
				t.Cleanup(release)
				return p
			}
			release()
		}
	}
	// An unusual range (or every pick taken): the kernel's choice.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("testport: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// reserve creates port's reservation in dir; ok is false when a live process
// holds it.
func reserve(dir string, port int) (release func(), ok bool) {
	path := filepath.Join(dir, strconv.Itoa(port))
	for range 2 {
		f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
		if err == nil {
			_, werr := fmt.Fprint(f, os.Getpid())
			if cerr := f.Close(); werr != nil || cerr != nil {
				os.Remove(path)
				return nil, false
			}
			return func() { os.Remove(path) }, true
		}
		if !errors.Is(err, fs.ErrExist) || !stale(path) {
			return nil, false
		}
		os.Remove(path) // its process is gone: take it over
	}
	return nil, false
}

// stale reports whether the reservation at path belongs to a process that no
// longer runs.
func stale(path string) bool {
	b, err := os.ReadFile(path)
	if err != nil {
		return false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return false // being written, or not ours to judge
	}
	return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
}

// Addr is Free as a host:port on 127.0.0.1.
func Addr(t testing.TB) string {
	t.Helper()
	return fmt.Sprintf("127.0.0.1:%d", Free(t))
}

// ephemeralLow is the first port of the kernel's ephemeral range (Linux's
// default where it cannot be read).
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil {
				return n
			}
		}
	}
	return 32768
}
