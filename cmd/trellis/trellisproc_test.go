package main

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// trellisProc is `trellis ARGS...` in a process of its own: this test binary
// re-executed with mainArgsEnv (TestMain), so that it takes signals as the
// binary does (SIGTERM stops a server gracefully). It is SIGKILLed at the end
// of the test unless it has exited.
type trellisProc struct {
	cmd  *exec.Cmd
	url  string        // a server's base URL, from its "listening on" line
	addr string        // its address (host:port)
	done chan struct{} // closed once it has exited (cmd.ProcessState is set)

	mu  sync.Mutex
	out strings.Builder // what it printed on stdout

	errOut procStderr // what it printed on stderr
}

// procStderr keeps what a process writes on stderr and passes it on to the
// test's stderr, but for the access log's lines (a line per request, which a
// test of many requests would drown the rest in).
type procStderr struct {
	prefix  string // put before each line passed on (a cluster node's name)
	mu      sync.Mutex
	all     strings.Builder
	partial []byte
}

func (e *procStderr) Write(b []byte) (int, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.all.Write(b)
	e.partial = append(e.partial, b...)
	for {
		i := bytes.IndexByte(e.partial, '\n')
		if i < 0 {
			return len(b), nil
		}
		line := e.partial[:i+1]
		if !bytes.Contains(line, []byte(" msg=request ")) {
			os.Stderr.Write(append([]byte(e.prefix), line...))
		}
		e.partial = e.partial[i+1:]
	}
}

// String is everything written so far.
func (e *procStderr) String() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.all.String()
}

// startTrellisServer starts `trellis server ARGS...` and waits until it listens.
func startTrellisServer(t *testing.T, args ...string) *trellisProc {
	t.Helper()
	// trellis server listening on http[s]://ADDR (store ...)
	return startTrellis(t, listeningLine, append([]string{"server"}, args...)...)
}

// listeningLine is the line `trellis server` prints once it listens: its URL.
var listeningLine = regexp.MustCompile(`listening on (https?://\S+)`)

// startTrellis starts `trellis ARGS...` in a process of its own and waits for
// a line of its stdout matching addrLine, whose first group is the URL (or
// the address) it serves on.
func startTrellis(t *testing.T, addrLine *regexp.Regexp, args ...string) *trellisProc {
	t.Helper()
	p, found := spawnTrellis(t, addrLine, args...)
	p.awaitServing(t, found, args[0], 30*time.Second)
	return p
}

// spawnTrellis starts `trellis ARGS...` without waiting: found receives the
// first group of the first stdout line matching addrLine.
func spawnTrellis(t *testing.T, addrLine *regexp.Regexp, args ...string) (*trellisProc, <-chan string) {
	t.Helper()
	return spawnNamed(t, "", addrLine, args...)
}

// spawnNamed is spawnTrellis whose stderr lines are passed on after name
// and ": " (one of several servers of a test).
func spawnNamed(t *testing.T, name string, addrLine *regexp.Regexp, args ...string) (*trellisProc, <-chan string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), mainArgsEnv+"="+strings.Join(args, "\n"))
	p := &trellisProc{cmd: cmd, done: make(chan struct{})}
	if name != "" {
		p.errOut.prefix = name + ": "
	}
	cmd.Stderr = &p.errOut
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.kill(t) })
	found := make(chan string, 1)
	go func() {
		defer close(p.done)
		lines := bufio.NewScanner(stdout)
		for lines.Scan() {
			line := lines.Text()
			p.mu.Lock()
			p.out.WriteString(line + "\n")
			p.mu.Unlock()
			if m := addrLine.FindStringSubmatch(line); m != nil {
				select {
				case found <- m[1]:
				default:
				}
			}
		}
		_ = cmd.Wait()
	}()
	return p, found
}

// awaitServing waits for the URL (or address) found delivers, and fails the
// test when the process exits first or within passes.
func (p *trellisProc) awaitServing(t *testing.T, found <-chan string, name string, within time.Duration) {
	t.Helper()
	select {
	case u := <-found:
		if _, addr, ok := strings.Cut(u, "://"); ok {
			p.url, p.addr = u, addr
		} else {
			p.addr = u
		}
	case <-p.done:
		t.Fatalf("trellis %s exited before serving: %s\n%s", name, p.cmd.ProcessState, p.errOut.String())
	case <-time.After(within):
		t.Fatalf("trellis %s did not serve within %s", name, within)
	}
}

// base is the server's URL (http:// and its address when only that is known).
func (p *trellisProc) base() string {
	if p.url == "" {
		return "http://" + p.addr
	}
	return p.url
}

// adminToken reads the secret of the admin token a first start wrote to the
// file its stdout names; it fails the test when there is none.
func (p *trellisProc) adminToken(t *testing.T) string {
	t.Helper()
	for _, line := range strings.Split(p.stdout(), "\n") {
		if path, ok := adminTokenPath(line); ok {
			return readSecret(t, path)
		}
	}
	t.Fatalf("no admin token file named: %q", p.stdout())
	return ""
}

// stdout returns what the process printed so far.
func (p *trellisProc) stdout() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

// exited reports whether the process has exited.
func (p *trellisProc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// signal sends sig to the process.
func (p *trellisProc) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("sending %s: %v", sig, err)
	}
}

// wait waits up to within for the process to exit and returns its exit code;
// it fails the test if it does not.
func (p *trellisProc) wait(t *testing.T, within time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
		return p.cmd.ProcessState.ExitCode()
	case <-time.After(within):
		t.Fatalf("the process did not exit within %s", within)
		return -1
	}
}

// kill SIGKILLs the process unless it has exited, and waits until it has.
func (p *trellisProc) kill(t *testing.T) {
	if !p.exited() {
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
	}
	<-p.done
}
