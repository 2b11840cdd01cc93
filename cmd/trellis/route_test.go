package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/trellis-dev/trellis"
	"github.com/trellis-dev/trellis/internal/testport"
	"github.com/trellis-dev/trellis/store"
	"github.com/trellis-dev/trellis/store/storesqlite"
)

var routedDouble = trellis.NewWorkflow("routed-double", func(wc *trellis.Context, n int) (int, error) {
	return trellis.Step(wc, "double", func(context.Context) (int, error) { return 2 * n, nil })
})

// TestServerRoutesNamespaces: a real `trellis server --store A --route
// orders=B` process keeps the runs of orders in B and the rest in A. Runs are
// started through the HTTP API and finished by remote workers of each
// namespace; then both files are opened as they are, and each run is in its
// namespace's store and only there.
func TestServerRoutesNamespaces(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.db"), filepath.Join(dir, "b.db")
	srv := startTrellisServer(t, "--store", "sqlite://"+a, "--route", "orders=sqlite://"+b, "--listen", testport.Addr(t))
	contains(t, "the listening line", srv.stdout(), "route orders sqlite://"+b)
	token := srv.adminToken(t)
	base := srv.base()

	for _, ns := range []string{"orders", "default"} {
		w, err := trellis.NewWorker(ctxT(t), trellis.Config{Server: base, Token: token, Namespace: ns})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { w.Client().Close() })
		if err := w.Register(ctxT(t), routedDouble); err != nil {
			t.Fatal(err)
		}
	}
	for i, ns := range []string{"orders", "default", "orders"} {
		id := fmt.Sprintf("%s-%d", ns, i)
		out := routedCall(t, base, token, "POST", "/v1/namespaces/"+ns+"/runs",
			fmt.Sprintf(`{"workflow":"routed-double","id":%q,"input":%d}`, id, 10+i), http.StatusCreated)
		var run trellis.Run
		if err := json.Unmarshal(out, &run); err != nil {
			t.Fatal(err)
		}
		var done trellis.Run
		deadline := time.Now().Add(30 * time.Second)
		for done.Status != trellis.StatusSucceeded {
			if time.Now().After(deadline) {
				t.Fatalf("run %s of %s: %s after 30s", id, ns, done.Status)
			}
			res := routedCall(t, base, token, "GET", "/v1/namespaces/"+ns+"/runs/"+run.ID+"/result?wait=10s", "", 0)
			if err := json.Unmarshal(res, &done); err != nil {
				t.Fatal(err)
			}
		}
		if string(done.Output) != fmt.Sprint(2*(10+i)) {
			t.Errorf("run %s: output %s, want %d", id, done.Output, 2*(10+i))
		}
	}
	srv.signal(t, syscall.SIGTERM)
	if code := srv.wait(t, 30*time.Second); code != 0 {
		t.Fatalf("the server exited %d", code)
	}

	for file, want := range map[string]map[string]bool{
		a: {"orders-0": false, "default-1": true, "orders-2": false},
		b: {"orders-0": true, "default-1": false, "orders-2": true},
	} {
		st, err := storesqlite.Open(ctxT(t), storesqlite.Config{Path: file, NoMigrate: true})
		if err != nil {
			t.Fatal(err)
		}
		for wid, in := range want {
			ns, _, _ := strings.Cut(wid, "-")
			run, err := st.RunGet(ctxT(t), &store.RunGetParams{Namespace: ns, Ref: wid})
			switch {
			case in && err != nil:
				t.Errorf("%s: run %s of %s: %v, want it there", filepath.Base(file), wid, ns, err)
			case in && run.Status != store.StatusSucceeded:
				t.Errorf("%s: run %s is %s, want succeeded", filepath.Base(file), wid, run.Status)
			case !in && !errors.Is(err, store.ErrRunNotFound):
				t.Errorf("%s: run %s of %s: %v, want ErrRunNotFound", filepath.Base(file), wid, ns, err)
			}
		}
		// The tokens are the control store's.
		toks, err := st.TokenList(ctxT(t))
		if err != nil {
			t.Fatal(err)
		}
		if (len(toks) > 0) != (file == a) {
			t.Errorf("%s holds %d tokens", filepath.Base(file), len(toks))
		}
		st.Close()
	}
}

// routedCall makes an API request and returns the body; want 0 takes any 2xx.
func routedCall(t *testing.T, base, token, method, path, body string, want int) []byte {
	t.Helper()
	req, err := http.NewRequestWithContext(ctxT(t), method, base+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	out, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	if (want != 0 && res.StatusCode != want) || res.StatusCode/100 != 2 {
		t.Fatalf("%s %s: %d %s", method, path, res.StatusCode, out)
	}
	return out
}

// TestServerRouteRefusals: bad --route values make the real binary exit
// without serving, with a clear error, and create no store file (neither the
// control store's nor a route's).
func TestServerRouteRefusals(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	a, b := "sqlite://"+filepath.Join(dir, "a.db"), "sqlite://"+filepath.Join(dir, "b.db")
	for _, c := range []struct {
		name   string
		args   []string
		code   int
		stderr string
	}{
		{"default with --store", []string{"--store", a, "--route", "default=" + b}, exitUsage, "--route default=URL names the store of --store"},
		{"routed twice", []string{"--store", a, "--route", "orders=" + b, "--route", "orders=" + b}, exitUsage, `namespace "orders" is routed twice`},
		{"default twice", []string{"--route", "default=" + a, "--route", "default=" + b}, exitUsage, `namespace "default" is routed twice`},
		{"no URL", []string{"--store", a, "--route", "orders="}, exitUsage, "want NAMESPACE=URL"},
		{"no =", []string{"--store", a, "--route", "orders"}, exitUsage, "want NAMESPACE=URL"},
		{"bad namespace", []string{"--store", a, "--route", "a b=" + b}, exitUsage, `"a b=`},
		{"system namespace", []string{"--store", a, "--route", "__system__=" + b}, exitUsage, "reserved"},
		{"no driver", []string{"--store", a, "--route", "orders=mysql://h/db"}, exitError, `route orders: no store driver for "mysql://"`},
		{"not a URL", []string{"--store", a, "--route", "orders=b.db"}, exitError, "route orders"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			args := append([]string{"server", "--listen", testport.Addr(t)}, c.args...)
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), mainArgsEnv+"="+strings.Join(args, "\n"))
			cmd.Dir = dir
			var stdout, stderr strings.Builder
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() != c.code || !strings.Contains(stderr.String(), c.stderr) {
				t.Errorf("trellis %q: %v; stderr %q; want exit %d and %q", args, err, stderr.String(), c.code, c.stderr)
			}
			if strings.Contains(stdout.String(), "listening") {
				t.Errorf("trellis %q served: %s", args, stdout.String())
			}
		})
	}
	for _, file := range []string{"a.db", "b.db", "trellis.db"} {
		if _, err := os.Stat(filepath.Join(dir, file)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("a refused server made %s: %v", file, err)
		}
	}
}

// TestRoutesFlagNamesRoutesWithoutSecrets: the listening line names each
// route, by namespace, with its URL's password hidden.
func TestRoutesFlagNamesRoutesWithoutSecrets(t *testing.T) {
	t.Parallel()
	var r routesFlag
	for _, v := range []string{"orders=postgres://u:s3cret@db2/trellis", "billing=sqlite:///srv/b.db", "default=sqlite:///srv/a.db"} {
		if err := r.Set(v); err != nil {
			t.Fatalf("Set(%q): %v", v, err)
		}
	}
	got := r.describe()
	want := "; route billing sqlite:///srv/b.db; route orders postgres://u:xxxxx@db2/trellis"
	if got != want || r.control != "sqlite:///srv/a.db" {
		t.Errorf("describe() = %q, control %q; want %q and sqlite:///srv/a.db", got, r.control, want)
	}
}
