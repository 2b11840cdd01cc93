package trellis_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/trellis-dev/trellis"
	"github.com/trellis-dev/trellis/internal/engine"
	"github.com/trellis-dev/trellis/internal/pgtest"
	"github.com/trellis-dev/trellis/store"
	"github.com/trellis-dev/trellis/store/storesqlite"
	"go.uber.org/goleak"
)

// protocolViolations collects the checkpoints of the engine, in every test of
// the package, that break the worker protocol's rules (internal/protocol): the
// Go engine is held to the rules the server enforces on every worker, and the
// run fails when one broke them (engine.ProtocolViolation).
var protocolViolations violations

type violations struct {
	mu   sync.Mutex
	errs []error
}

func (v *violations) add(run *store.Run, p *store.CheckpointParams, err error) {
	b, _ := json.Marshal(p)
	v.mu.Lock()
	defer v.mu.Unlock()
	if len(v.errs) < 20 {
		v.errs = append(v.errs, fmt.Errorf("run %s (%s): %w\n\tcheckpoint: %s", run.ID, run.Workflow, err, b))
	}
}

func (v *violations) err() error {
	v.mu.Lock()
	defer v.mu.Unlock()
	if len(v.errs) == 0 {
		return nil
	}
	return fmt.Errorf("the engine wrote checkpoints that break the worker protocol's rules:\n%w", errors.Join(v.errs...))
}

// TestMain runs the tests, drops the Postgres schemas storeURL handed out, and
// fails the run if a goroutine outlives them.
func TestMain(m *testing.M) {
	engine.ProtocolViolation = protocolViolations.add
	pgtest.Main(m, func() error {
		if err := protocolViolations.err(); err != nil {
			return err
		}
		return goleak.Find()
	})
}

// envTestStore set to "postgres" runs the tests that use storeURL (and the Map
// benchmark) on Postgres, each on a schema of its own that no other test uses at
// the same time: one that an earlier test of the process emptied, or a new one
// (pgtest.ReusedSchemaURL).
const envTestStore = "TRELLIS_TEST_STORE"

// storeURL returns the URL of an empty store: SQLite in a temporary directory,
// or an empty Postgres schema when envTestStore is "postgres" (emptied again
// after the test's cleanups, which must close every store opened on it).
func storeURL(t testing.TB) string {
	t.Helper()
	if os.Getenv(envTestStore) == "postgres" {
		return pgtest.ReusedSchemaURL(t)
	}
	return sqliteURL(t)
}

// sqliteURL returns a fresh SQLite store URL, whatever envTestStore says.
func sqliteURL(t testing.TB) string {
	t.Helper()
	return storesqlite.URL(filepath.Join(t.TempDir(), "trellis.db"))
}

// open opens a client on url with fast test settings and closes it at cleanup.
func open(t *testing.T, url string, mod ...func(*trellis.Config)) *trellis.Client {
	t.Helper()
	cfg := trellis.Config{Store: url}
	cfg.Worker.MaxInlineBackoff = 20 * time.Millisecond
	cfg.Worker.PollInterval = 50 * time.Millisecond
	cfg.Worker.ShutdownGrace = 2 * time.Second
	for _, m := range mod {
		m(&cfg)
	}
	c, err := trellis.Open(context.Background(), cfg)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return c
}

// openStore opens the store at url directly (as a worker of another process
// would) and closes it at cleanup.
func openStore(t *testing.T, url string) store.Store {
	t.Helper()
	st, err := trellis.OpenStore(context.Background(), url, time.Now)
	if err != nil {
		t.Fatalf("opening store: %v", err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

// setup opens a client on a fresh store and registers wfs.
func setup(t *testing.T, wfs ...trellis.Registrable) *trellis.Client {
	t.Helper()
	c := open(t, storeURL(t))
	register(t, c, wfs...)
	return c
}

func register(t *testing.T, c *trellis.Client, wfs ...trellis.Registrable) {
	t.Helper()
	if err := c.Register(context.Background(), wfs...); err != nil {
		t.Fatalf("register: %v", err)
	}
}

func ctxT(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// waitStatus waits (push, with the client's fallback poll) until the run has status.
func waitStatus(t *testing.T, c *trellis.Client, ref string, want trellis.Status) *trellis.Run {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		run, err := c.Get(context.Background(), ref)
		if err != nil {
			t.Fatalf("get %s: %v", ref, err)
		}
		if run.Status == want {
			return run
		}
		if time.Now().After(deadline) {
			t.Fatalf("run %s: status %s, want %s (wait reason %q, error %+v)", ref, run.Status, want, run.WaitReason, run.Error)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func mustResult[Out any](t *testing.T, h *trellis.Handle[Out]) Out {
	t.Helper()
	out, err := h.Result(ctxT(t))
	if err != nil {
		t.Fatalf("result of %s: %v", h.RunID(), err)
	}
	return out
}

func must[T any](t *testing.T) func(T, error) T {
	return func(v T, err error) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

var errBoom = errors.New("boom")

// testProcess is this test binary re-executed to run one test function (a worker
// or client process of the multi-process tests), until it ends or is killed.
type testProcess struct{ cmd *exec.Cmd }

// startTestProcess runs the test named test in a new process with env added.
func startTestProcess(t *testing.T, test string, env ...string) *testProcess {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+test+"$", "-test.count=1")
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s process: %v", test, err)
	}
	return &testProcess{cmd: cmd}
}

// terminate asks the process to stop with SIGTERM and waits for it to exit,
// up to 30s, then kills it.
func (p *testProcess) terminate(t *testing.T) {
	t.Helper()
	if p.cmd.ProcessState != nil {
		return
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("terminating process: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("process after SIGTERM: %v", err)
		}
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
		<-done
		t.Fatal("process did not exit within 30s of SIGTERM")
	}
}

// kill ends the process with SIGKILL, unless it has ended already.
func (p *testProcess) kill(t *testing.T) {
	t.Helper()
	if p.cmd.ProcessState != nil {
		return
	}
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatalf("killing process: %v", err)
	}
	_ = p.cmd.Wait() // reports "signal: killed"
}

// workUntilKilled is the body of the crash tests' worker processes: a client
// on cfg whose embedded worker runs wfs until the process is killed.
func workUntilKilled(t *testing.T, cfg trellis.Config, wfs ...trellis.Registrable) {
	// A worker that starts while its database restarts (TestPostgresRestart's
	// first restart can come before this process is up) tries again, as a
	// supervisor would start it again; one that exited left no worker.
	deadline := time.Now().Add(time.Minute)
	for {
		c, err := trellis.Open(context.Background(), cfg)
		if err == nil {
			if err = c.Register(context.Background(), wfs...); err == nil {
				select {} // until SIGKILL
			}
			c.Close()
		}
		if time.Now().After(deadline) {
			t.Fatal(err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
