package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/trellis-dev/trellis/internal/sqlitedrv"
)

// `trellis server --insecure` serves the API on a loopback address until its
// context ends (SIGTERM), then stops and exits 0.
func TestServerServesUntilStopped(t *testing.T) {
	url := "sqlite://" + filepath.Join(t.TempDir(), "trellis.db")
	base, _, stop := startServerArgs(t, io.Discard, "--store", url, "--listen", "127.0.0.1:0", "--insecure")
	res, err := http.Post(base+"/v1/namespaces/default/runs", "application/json", strings.NewReader(`{"workflow":"w","input":{"a":1}}`))
	if err != nil {
		t.Fatal(err)
	}
	var started struct{ ID, Status string }
	json.NewDecoder(res.Body).Decode(&started)
	res.Body.Close()
	if res.StatusCode != 201 || started.Status != "pending" {
		t.Fatalf("start: %d %+v", res.StatusCode, started)
	}
	stop() // the context ends as SIGTERM ends it: the server stops and exits 0
}

// Secure by default: without --insecure the first start creates an admin
// token and writes its secret to a 0600 file beside the SQLite store, whose path
// it prints (never the secret); a request without it is 401, with it 201; a
// second start creates nothing and leaves the file alone. --insecure off
// loopback is refused.
func TestServerSecureByDefault(t *testing.T) {
	dbPath := filepath.Join(t.TempDir(), "trellis.db")
	url := "sqlite://" + dbPath
	base, secret, stop := startServer(t, url)
	if !strings.HasPrefix(secret, "trl_") {
		t.Fatalf("first start wrote no admin token (got %q)", secret)
	}
	if got := readSecret(t, dbPath+".admin-token"); got != secret {
		t.Fatalf("the default admin token file %s holds %q, want the secret", dbPath+".admin-token", got)
	}
	post := func(token string) int {
		req, _ := http.NewRequest("POST", base+"/v1/namespaces/default/runs", strings.NewReader(`{"workflow":"w"}`))
		req.Header.Set("Content-Type", "application/json")
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode
	}
	if code := post(""); code != 401 {
		t.Fatalf("no token: %d, want 401", code)
	}
	if code := post("trl_wrong"); code != 401 {
		t.Fatalf("wrong token: %d, want 401", code)
	}
	if code := post(secret); code != 201 {
		t.Fatalf("admin token: %d, want 201", code)
	}
	stop()
	_, again, stop2 := startServer(t, url)
	stop2()
	if again != "" {
		t.Fatalf("second start wrote another token %q", again)
	}
	if got := readSecret(t, dbPath+".admin-token"); got != secret {
		t.Fatalf("the second start changed the admin token file")
	}
	if res := trellisCmd(t, "server", "--store", url, "--insecure", "--listen", "0.0.0.0:0"); res.code != 1 || !strings.Contains(res.stderr, "loopback") {
		t.Fatalf("insecure off loopback: exit %d %q", res.code, res.stderr)
	}
	if res := trellisCmd(t, "server", "-h"); res.code != 0 || !strings.Contains(res.stdout, "--listen") {
		t.Fatalf("help: exit %d %q", res.code, res.stdout)
	}
}

// startServer runs `trellis server` (with tokens) on url and returns its base
// URL, the admin token it printed (if any) and a function that stops it.
func startServer(t *testing.T, url string) (base, secret string, stop func()) {
	t.Helper()
	return startServerArgs(t, io.Discard, "--store", url, "--listen", "127.0.0.1:0")
}

// startServerArgs runs `trellis server` in this process with args and stderr,
// waits for its "listening on" line and returns its base URL, the admin token
// it printed (if any) and a function that stops it as SIGTERM does, failing
// the test unless it exits 0.
func startServerArgs(t *testing.T, stderr io.Writer, args ...string) (base, secret string, stop func()) {
	t.Helper()
	// The server lives as long as the test, not ctxT's 30 s: a test's
	// parallel subtests may start later than that (TestExitCodes' did under
	// -parallel 4, and met a stopped server).
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel) // for a caller that never calls stop
	pr, pw := io.Pipe()
	code := make(chan int, 1)
	go func() {
		code <- run(ctx, append([]string{"server"}, args...), pw, stderr)
		pw.Close()
	}()
	lines := bufio.NewScanner(pr)
	for lines.Scan() {
		line := lines.Text()
		if strings.Contains(line, "trl_") {
			t.Errorf("trellis server printed a secret: %q", line)
		}
		if path, ok := adminTokenPath(line); ok {
			secret = readSecret(t, path)
			continue
		}
		if _, rest, ok := strings.Cut(line, "listening on "); ok {
			base, _, _ = strings.Cut(rest, " ")
			break
		}
	}
	if base == "" {
		cancel()
		t.Fatalf("server did not start (exit %d)", <-code)
	}
	go io.Copy(io.Discard, pr)
	return base, secret, func() {
		cancel()
		if c := <-code; c != 0 {
			t.Errorf("server exit %d", c)
		}
	}
}

// adminTokenPath is the path a first start's line names the admin token file by.
func adminTokenPath(line string) (string, bool) {
	_, rest, ok := strings.Cut(line, "its secret is in ")
	if !ok {
		return "", false
	}
	path, _, _ := strings.Cut(rest, " (mode 0600)")
	return path, true
}

// readSecret reads the admin token file at path, checking its mode.
func readSecret(t *testing.T, path string) string {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("admin token file %s: mode %v, want 0600", path, fi.Mode().Perm())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// TestServerWALPreallocateDefault pins how trellis server fills in
// wal_preallocate: added to a SQLite URL that sets none, kept when set, and
// never added to a Postgres URL.
func TestServerWALPreallocateDefault(t *testing.T) {
	t.Parallel()
	def := "wal_preallocate=67108864"
	cases := map[string]string{
		"sqlite:trellis.db":                               "sqlite:trellis.db?" + def,
		"sqlite:///tmp/t.db?durability=relaxed":           "sqlite:///tmp/t.db?durability=relaxed&" + def,
		"sqlite:///tmp/t.db?wal_preallocate=0":            "sqlite:///tmp/t.db?wal_preallocate=0",
		"postgres://postgres@127.0.0.1/test?schema=a":     "postgres://postgres@127.0.0.1/test?schema=a",
		"postgresql://postgres@127.0.0.1/test?sslmode=no": "postgresql://postgres@127.0.0.1/test?sslmode=no",
	}
	for in, want := range cases {
		if got := withWALPreallocate(in); got != want {
			t.Errorf("withWALPreallocate(%q) = %q, want %q", in, got, want)
		}
	}
}

// `trellis server` writes its warnings and errors to stderr: /readyz answers
// anyone a 503 that names nothing of the store, and the log says why (here, a
// schema one version behind the binary).
func TestServerLogsToStderr(t *testing.T) {
	path := filepath.Join(t.TempDir(), "trellis.db")
	var logs lockedBuffer
	base, _, stop := startServerArgs(t, &logs, "--store", "sqlite://"+path, "--listen", "127.0.0.1:0", "--insecure")

	db, err := sqlitedrv.Open(path + "?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	// The latest migration's record hidden: the schema reads as one behind.
	if _, err := db.Exec(`UPDATE schema_migrations SET version = -version WHERE version = (SELECT MAX(version) FROM schema_migrations)`); err != nil {
		t.Fatal(err)
	}
	res, err := http.Get(base + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 503 || strings.Contains(string(body), path) {
		t.Fatalf("readyz on a schema behind: %d %s", res.StatusCode, body)
	}
	if l := logs.String(); !strings.Contains(l, "not ready") || !strings.Contains(l, "trellis migrate") {
		t.Fatalf("stderr does not say why the server is not ready: %q", l)
	}
	stop()
}

// TLS flags that cannot go together are usage errors (exit 2), before any store
// is opened.
func TestServerTLSFlagUsage(t *testing.T) {
	for _, args := range [][]string{{"--tls-cert", "c.pem"}, {"--tls-key", "k.pem"}, {"--client-ca", "ca.pem"}} {
		res := trellisCmd(t, append([]string{"server", "--store", "sqlite:" + t.TempDir() + "/x.db"}, args...)...)
		if res.code != 2 || !strings.Contains(res.stderr, "--tls") {
			t.Errorf("server %v: exit %d %q, want 2 naming the flags", args, res.code, res.stderr)
		}
	}
}
