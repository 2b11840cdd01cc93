package server

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// A client that sends the headers of a start at once and then its body too
// slowly (a byte now and then, so that it never goes quiet) is cut off when
// ReadTimeout runs out, counted from the request's first byte: it is answered
// 408 request_timeout as problem+json, the connection is closed, and no run
// is created. With an Idempotency-Key (whose body the server reads before the
// handler does) as without.
func TestSlowBodyIsCutOff(t *testing.T) {
	e := newEnv(t, storeURLs(t)["sqlite"](t), func(c *Config) { c.ReadTimeout = 300 * time.Millisecond })
	for _, hdr := range []string{"", "Idempotency-Key: slow-1\r\n"} {
		testSlowBody(t, e, hdr)
	}
}

func testSlowBody(t *testing.T, e *env, hdr string) {
	before := e.runCount()
	res, body := slowStart(t, e, hdr)
	if res.StatusCode != http.StatusRequestTimeout || res.Header.Get("Content-Type") != "application/problem+json" {
		t.Fatalf("a slow body got %d %s %s, want 408 problem+json", res.StatusCode, res.Header.Get("Content-Type"), body)
	}
	var p Problem
	if err := json.Unmarshal(body, &p); err != nil {
		t.Fatalf("decoding %s: %v", body, err)
	}
	if p.Code != "request_timeout" || p.Status != 408 || !strings.Contains(p.Detail, "read timeout") ||
		!strings.HasSuffix(p.Type, "#request_timeout") {
		t.Fatalf("problem %+v, want code request_timeout naming the read timeout", p)
	}
	if !res.Close {
		t.Error("the connection of a request cut off is kept alive")
	}
	if n := e.runCount(); n != before {
		t.Fatalf("%d runs after a request cut off, want %d", n, before)
	}
	e.do("GET", "/readyz", "", nil).want(t, 200) // the server goes on serving others
}

// slowStart sends a start's headers (and hdr) and then its body a byte every 20 ms
// until the server answers, and returns the answer and its body.
func slowStart(t *testing.T, e *env, hdr string) (*http.Response, []byte) {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(e.base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// Long enough that trickling it would take minutes: only the server's
	// timeout can end the request.
	payload := `{"workflow":"echo","input":"` + strings.Repeat("x", 10000) + `"}`
	head := "POST /v1/namespaces/default/runs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer producer\r\n" +
		"Content-Type: application/json\r\n" + fmt.Sprintf("Content-Length: %d\r\n", len(payload)) + hdr
	if _, err := io.WriteString(conn, head+"\r\n"); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	trickled := make(chan struct{})
	go func() {
		defer close(trickled)
		tick := time.NewTicker(20 * time.Millisecond) // the slow client under test
		defer tick.Stop()
		for i := 0; i < len(payload); i++ {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			if _, err := conn.Write([]byte{payload[i]}); err != nil {
				return // the server closed the connection
			}
		}
	}()
	defer func() { close(stop); <-trickled }()
	conn.SetReadDeadline(time.Now().Add(30 * time.Second)) // a bound for a broken server, not a measurement
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer to a slow body: %v", err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("reading the answer: %v", err)
	}
	return res, b
}
