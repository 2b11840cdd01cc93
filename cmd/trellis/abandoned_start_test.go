package main

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/trellis-dev/trellis"
	"github.com/trellis-dev/trellis/internal/pgtest"
)

// abandonedLease is the worker's lease in TestAbandonedStart: long against the
// time a run takes, so that a run stranded until its lease expires shows.
const abandonedLease = 10 * time.Second

// Clients that send a start and close their connection at once, before the
// answer, while a remote worker process waits with free slots: each run the
// server created (leased to that worker, a hand-off) reaches the worker and
// finishes at once, rather than waiting out its lease. On SQLite and Postgres.
func TestAbandonedStart(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real server and worker processes")
	}
	t.Parallel() // a process test: beside the others (CI runs this package with -parallel 4)
	for name, url := range map[string]func(t *testing.T) string{
		"sqlite":   storeURL,
		"postgres": func(t *testing.T) string { return pgtest.SchemaURL(t) },
	} {
		t.Run(name, func(t *testing.T) { abandonedStart(t, url(t)) })
	}
}

func abandonedStart(t *testing.T, url string) {
	trellisCmd(t, "migrate", "--store", url).ok(t)
	token := strings.TrimSpace(trellisCmd(t, "tokens", "create", "--name", "all", "--grant", "worker:default",
		"--grant", "producer:default", "--grant", "reader:default", "--store", url).ok(t).stdout)
	srv := startTrellisServer(t, "--store", url, "--listen", "127.0.0.1:0")
	w := startStepLogWorker(t, "waiting", srv.base(), token, t.TempDir(), false, envStepLogLease+"="+abandonedLease.String())
	defer w.signal(syscall.SIGKILL)
	c, err := trellis.Open(ctxT(t), trellis.Config{Server: srv.base(), Token: token})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	waitFor(t, "a live worker", 60*time.Second, func() bool {
		ws, err := c.Workers(ctxT(t))
		return err == nil && len(ws) == 1 && ws[0].Live
	})
	addr := strings.TrimPrefix(srv.base(), "http://")
	// The client closes its connection after a delay from none to 4 ms:
	// some closes come before the server creates the run, some while it
	// does, some after. The last fifth waits from 5 to 100 ms: on a loaded
	// machine (CI) a create took longer than 4 ms, every close came first
	// and nothing was tested.
	const starts = 80
	sent := time.Now()
	for i := range starts {
		body := fmt.Sprintf(`{"workflow":"steplog","id":"abandoned-%d","input":%d}`, i, i)
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		_, err = fmt.Fprintf(conn, "POST /v1/namespaces/default/runs HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\n"+
			"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", addr, token, len(body), body)
		delay := time.Duration(i%9) * 500 * time.Microsecond
		if i >= starts*4/5 {
			delay = time.Duration(1+i%20) * 5 * time.Millisecond
		}
		time.Sleep(delay)
		conn.Close() // before the answer
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Each run created finishes within a fraction of the lease; a run
	// stranded would still be leased to the worker when it is checked.
	time.Sleep(3 * time.Second)
	if time.Since(sent) > abandonedLease*3/4 {
		t.Skipf("the starts took %v: too slow a machine to tell a stranded run from one that was not", time.Since(sent))
	}
	created, stranded := 0, 0
	for i := range starts {
		id := fmt.Sprint("abandoned-", i)
		run, err := c.Get(ctxT(t), id)
		switch {
		case errors.Is(err, trellis.ErrRunNotFound): // the server saw the client go before it created the run
		case err != nil:
			t.Fatal(err)
		case run.Status != trellis.StatusSucceeded:
			created++
			stranded++
			t.Errorf("run %s (%s): %s, leased to %q until %v: stranded by its abandoned start", id, run.ID, run.Status,
				run.LeaseOwner, run.LeaseExpiresAt)
		default:
			created++
		}
	}
	if created == 0 {
		t.Fatalf("none of %d abandoned starts created a run", starts)
	}
	t.Logf("%d of %d abandoned starts created a run, %d of them stranded", created, starts, stranded)
}
