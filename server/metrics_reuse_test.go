package server

import (
	"context"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/trellis-dev/trellis"
	"github.com/trellis-dev/trellis/store/storesqlite"
)

// A server whose Start fails (its port is taken) leaves its collectors on the
// caller's Metrics; the next server on the same Metrics (trellis dev falling
// back to another port) starts and counts its requests on them.
func TestMetricsReusedAfterFailedStart(t *testing.T) {
	t.Parallel()
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	url := storesqlite.URL(filepath.Join(t.TempDir(), "trellis.db"))
	m := trellis.NewMetrics()
	first, err := New(context.Background(), Config{Store: url, Listen: taken.Addr().String(), Insecure: true, Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Start(); err == nil || !strings.Contains(err.Error(), "address already in use") {
		t.Fatalf("Start on a taken port: %v", err)
	}
	if err := first.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	second, err := New(context.Background(), Config{Store: url, Listen: "127.0.0.1:0", Insecure: true, Metrics: m})
	if err != nil {
		t.Fatalf("a second server on the same Metrics: %v", err)
	}
	if err := second.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := second.Shutdown(ctx); err != nil {
			t.Error(err)
		}
	}()
	base := "http://" + second.Addr().String()
	resp, err := http.Get(base + "/v1/namespaces/default/runs")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	resp, err = http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), `trellis_api_requests_total{code="200",route="listRuns"} 1`) {
		t.Errorf("the second server's request is not counted:\n%s", grepLines(string(body), "trellis_api_requests_total"))
	}
}

func grepLines(s, substr string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, substr) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
