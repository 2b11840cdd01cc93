package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
)

// `trellis server --insecure` serves the API on a loopback address until its
// context ends (SIGTERM), then stops and exits 0.
func TestServerServesUntilStopped(t *testing.T) {
	url := "sqlite://" + filepath.Join(t.TempDir(), "trellis.db")
	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	pr, pw := io.Pipe()
	code := make(chan int, 1)
	go func() {
		code <- run(ctx, []string{"server", "--store", url, "--listen", "127.0.0.1:0", "--insecure"}, pw, io.Discard)
		pw.Close()
	}()
	lines := bufio.NewScanner(pr)
	if !lines.Scan() {
		t.Fatalf("no output: %v (exit %d)", lines.Err(), <-code)
	}
	_, rest, _ := strings.Cut(lines.Text(), "listening on ")
	base, _, _ := strings.Cut(rest, " ")
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
	cancel()
	go io.Copy(io.Discard, pr)
	if c := <-code; c != 0 {
		t.Fatalf("exit %d", c)
	}
}

// Without --insecure the command refuses to start (tokens are not wired yet), and
// --insecure off loopback is refused.
func TestServerRefusesWithoutAuth(t *testing.T) {
	url := "sqlite://" + filepath.Join(t.TempDir(), "trellis.db")
	if res := trellisCmd(t, "server", "--store", url); res.code != 2 || !strings.Contains(res.stderr, "--insecure") {
		t.Fatalf("no --insecure: exit %d %q", res.code, res.stderr)
	}
	if res := trellisCmd(t, "server", "--store", url, "--insecure", "--listen", "0.0.0.0:0"); res.code != 1 || !strings.Contains(res.stderr, "loopback") {
		t.Fatalf("insecure off loopback: exit %d %q", res.code, res.stderr)
	}
	if res := trellisCmd(t, "server", "-h"); res.code != 0 || !strings.Contains(res.stdout, "--listen") {
		t.Fatalf("help: exit %d %q", res.code, res.stdout)
	}
}
