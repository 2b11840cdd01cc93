package trellis_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/trellis-dev/trellis/internal/pgtest"
)

// Failure tests on PostgreSQL: workers killed with SIGKILL, and the database server
// itself restarted while runs are started and executed.

func TestCrashRecoveryPostgres(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test skipped in -short mode")
	}
	url := pgtest.SchemaURL(t)
	crashRecovery(t, url, filepath.Join(t.TempDir(), "effects.log"), killWorkers)
}

// TestCrashRecoveryWhileWaitingPostgres is the waiting crash test (sleeps, events,
// children and approvals across SIGKILLs of the worker) on Postgres.
func TestCrashRecoveryWhileWaitingPostgres(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test skipped in -short mode")
	}
	crashRecoveryWhileWaiting(t, pgtest.SchemaURL(t))
}

// TestPostgresRestart restarts the PostgreSQL server twice while a client starts
// runs and a worker process executes them: both must reconnect by themselves, every
// acknowledged start must run to success, and no step may be recorded twice.
//
// It never touches the shared cluster other tests use: it runs on a cluster of its
// own (restartCluster, port 5499), which it creates when missing.
func TestPostgresRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("database restart test skipped in -short mode")
	}
	c := restartCluster(t)
	schema := fmt.Sprintf("restart_%d", time.Now().UnixNano())
	url := pgtest.WithSchema(t, c.url, schema)
	t.Cleanup(func() { pgtest.DropSchema(t, c.url, schema) })
	restarts := 0
	restart := func(t *testing.T, round int, w *crashWorker, _, _ string) *crashWorker {
		if round == 1 || round == 4 {
			c.restart(t)
			restarts++
		}
		return w
	}
	crashRecovery(t, url, filepath.Join(t.TempDir(), "effects.log"), restart)
	if restarts != 2 {
		t.Fatalf("%d restarts, want 2", restarts)
	}
}

// testCluster is a PostgreSQL cluster managed with Debian's postgresql-common tools.
type testCluster struct {
	version, name string
	url           string
}

const (
	restartClusterName = "trellis_restart"
	restartClusterPort = "5499"
)

// restartCluster returns the test cluster restartClusterName, creating and starting
// it if needed. It skips the test (fails it under CI=true) when that is impossible.
func restartCluster(t *testing.T) *testCluster {
	t.Helper()
	skip := func(format string, args ...any) {
		t.Helper()
		msg := fmt.Sprintf(format, args...) + " (needs postgresql-common's pg_createcluster and pg_ctlcluster, run as root)"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	if _, err := exec.LookPath("pg_ctlcluster"); err != nil {
		skip("pg_ctlcluster not found")
	}
	lockCluster(t)
	versions, err := os.ReadDir("/etc/postgresql")
	if err != nil || len(versions) == 0 {
		skip("no PostgreSQL installation under /etc/postgresql")
	}
	c := &testCluster{
		version: versions[len(versions)-1].Name(), name: restartClusterName,
		url: "postgres://postgres@127.0.0.1:" + restartClusterPort + "/postgres?sslmode=disable",
	}
	if _, err := os.Stat(filepath.Join("/etc/postgresql", c.version, c.name)); err != nil {
		out, err := exec.Command("pg_createcluster", c.version, c.name, "--port", restartClusterPort,
			"--", "--auth=trust").CombinedOutput()
		if err != nil {
			skip("creating cluster %s/%s: %v: %s", c.version, c.name, err, out)
		}
	}
	if !c.online() {
		if out, err := c.ctl("start"); err != nil {
			skip("starting cluster %s/%s: %v: %s", c.version, c.name, err, out)
		}
	}
	c.waitReady(t)
	return c
}

// lockCluster holds an exclusive lock on the restart cluster until t ends, so that
// test processes that run at once (CI runs the root package on two libraries side
// by side) take turns with it instead of restarting it under each other. The lock
// is a file's flock: the kernel drops it when a process dies.
func lockCluster(t *testing.T) {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(os.TempDir(), "trellis-"+restartClusterName+".lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatalf("opening the restart cluster's lock: %v", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		t.Fatalf("locking the restart cluster: %v", err)
	}
	t.Cleanup(func() { f.Close() }) // closing the file releases the lock
}

func (c *testCluster) ctl(action string) ([]byte, error) {
	return exec.Command("pg_ctlcluster", "--skip-systemctl-redirect", c.version, c.name, action).CombinedOutput()
}

func (c *testCluster) online() bool {
	out, err := exec.Command("pg_ctlcluster", "--skip-systemctl-redirect", c.version, c.name, "status").CombinedOutput()
	return err == nil && strings.Contains(string(out), "server is running")
}

// waitReady waits until the cluster accepts connections.
func (c *testCluster) waitReady(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := pgtest.Ping(ctx, c.url)
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("cluster %s/%s not ready: %v", c.version, c.name, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (c *testCluster) restart(t *testing.T) {
	t.Helper()
	t.Logf("restarting PostgreSQL cluster %s/%s", c.version, c.name)
	if out, err := c.ctl("restart"); err != nil {
		t.Fatalf("restarting cluster: %v: %s", err, out)
	}
}
