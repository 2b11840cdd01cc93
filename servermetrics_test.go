package trellis_test

import (
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/trellis-dev/trellis"
	"github.com/trellis-dev/trellis/internal/servermetrics"
)

// What a server records goes through internal/servermetrics, not through
// methods of the public Metrics: For gives the Observer of a *Metrics, and
// what it records is served by the metrics' Handler.
func TestServerMetricsObserver(t *testing.T) {
	m := trellis.NewMetrics()
	o := servermetrics.For(m)
	o.ObserveStarted("billing")
	o.ObserveStarted("billing")
	o.AddStreamSubscribers(3)
	o.AddStreamSubscribers(-1)
	o.ObserveRemoteRelease("billing")
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body := rec.Body.String()
	for _, want := range []string{
		`trellis_runs_started_total{workflow="billing"} 2`,
		`trellis_stream_subscribers 2`,
		`trellis_run_attempts_total{status="pending",workflow="billing"} 1`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %q:\n%s", want, body)
		}
	}
}
