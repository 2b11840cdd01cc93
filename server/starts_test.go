package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/trellis-dev/trellis"
	"github.com/trellis-dev/trellis/store"
)

// TestGoClientCoalescesStarts starts runs 300 at a time through one Go client
// on a server. The client coalesces them into runs:batch requests, and each
// caller still gets its own outcome: its run, or the error its start alone
// would get. A workflow ID already taken fails its item only; a queue the token
// may not start on makes the server refuse the whole batch, and the client then
// sends that batch's starts one by one.
func TestGoClientCoalescesStarts(t *testing.T) {
	for name, url := range storeURLs(t) {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, url(t))
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			c, err := trellis.Open(ctx, trellis.Config{Server: e.base, Token: "q1-producer"})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if _, err := c.StartRaw(ctx, "await-go", nil, trellis.StartOptions{ID: "taken", Queue: "q1"}); err != nil {
				t.Fatal(err)
			}
			batches := func(code string) int {
				t.Helper()
				metrics := string(e.do("GET", "/metrics", "global-reader", nil).want(t, 200).body)
				m := regexp.MustCompile(`trellis_api_requests_total\{code="` + code + `",route="startRuns"\} (\d+)`).FindStringSubmatch(metrics)
				if m == nil {
					return 0
				}
				n, _ := strconv.Atoi(m[1])
				return n
			}
			const n = 300
			for round, odd := range map[int]string{1: "taken", 2: "forbidden"} {
				runs := make([]*trellis.Run, n)
				errs := make([]error, n)
				var wg sync.WaitGroup
				for i := range n {
					wg.Go(func() {
						o := trellis.StartOptions{ID: fmt.Sprintf("r%d-%d", round, i), Queue: "q1"}
						if i == n/2 && odd == "taken" {
							o.ID = "taken"
						}
						if i == n/2 && odd == "forbidden" {
							o.Queue = "q2"
						}
						runs[i], errs[i] = c.StartRaw(ctx, "await-go", nil, o)
					})
				}
				wg.Wait()
				for i := range n {
					var re *trellis.RemoteError
					switch {
					case i == n/2 && odd == "taken":
						if !errors.Is(errs[i], trellis.ErrRunExists) || !errors.As(errs[i], &re) || re.Status != 409 {
							t.Errorf("round %d, start %d (workflow ID taken): %v, want a 409 ErrRunExists", round, i, errs[i])
						}
					case i == n/2 && odd == "forbidden":
						if !errors.Is(errs[i], trellis.ErrPermissionDenied) {
							t.Errorf("round %d, start %d (queue q2): %v, want ErrPermissionDenied", round, i, errs[i])
						}
					case errs[i] != nil:
						t.Errorf("round %d, start %d: %v", round, i, errs[i])
					case runs[i].WorkflowID != fmt.Sprintf("r%d-%d", round, i) || runs[i].Queue != "q1":
						t.Errorf("round %d, start %d: got run %+v", round, i, runs[i])
					}
				}
				// (Whether the forbidden start was in a batch, which the server
				// then refused, or among the first starts, sent alone, depends
				// on which goroutine came first: its caller's error is the same.)
				if odd == "taken" && batches("200") == 0 {
					t.Errorf("round %d: the starts were not coalesced: no runs:batch request succeeded", round)
				}
			}
			admin, err := trellis.Open(ctx, trellis.Config{Server: e.base, Token: "admin"})
			if err != nil {
				t.Fatal(err)
			}
			defer admin.Close()
			page, err := admin.List(ctx, trellis.ListOptions{Limit: 1000})
			if err != nil {
				t.Fatal(err)
			}
			if got, want := len(page.Runs), 1+2*(n-1); got != want {
				t.Errorf("%d runs stored, want %d", got, want)
			}
		})
	}
}

// TestGoClientQueuedStarts holds the client's first four start requests at the
// door of a real server, so that the next starts queue, and checks what happens
// to them: a start whose caller gives up before its batch is sent is not sent
// (no run); the others go once a request in flight answers; and closing the
// client fails the starts still queued with ErrClosed.
func TestGoClientQueuedStarts(t *testing.T) {
	e := newEnv(t, storeURLs(t)["sqlite"](t))
	var (
		mu      sync.Mutex
		held    int
		release = make(chan struct{})
	)
	// door serves the server's API, holding each POST /runs until release
	// is closed.
	door := func(release chan struct{}) *httptest.Server {
		return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/runs") {
				mu.Lock()
				held++
				mu.Unlock()
				<-release
			}
			e.srv.Handler().ServeHTTP(w, r)
		}))
	}
	gate := door(release)
	defer gate.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := trellis.Open(ctx, trellis.Config{Server: gate.URL, Token: "producer"})
	if err != nil {
		t.Fatal(err)
	}
	waitHeld := func(n int) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			mu.Lock()
			h := held
			mu.Unlock()
			if h >= n {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d start requests held, want %d", h, n)
			}
			time.Sleep(time.Millisecond)
		}
	}
	startOn := func(ctx context.Context, c *trellis.Client, id string) chan error {
		ch := make(chan error, 1)
		go func() {
			_, err := c.StartRaw(ctx, "await-go", nil, trellis.StartOptions{ID: id})
			ch <- err
		}()
		return ch
	}
	start := func(ctx context.Context, id string) chan error { return startOn(ctx, c, id) }
	var first []chan error
	for i := range 4 {
		first = append(first, start(ctx, fmt.Sprintf("first-%d", i)))
	}
	waitHeld(4)
	gone, giveUp := context.WithCancel(ctx)
	goneErr := start(gone, "gone")
	kept := start(ctx, "kept")
	time.Sleep(50 * time.Millisecond) // both queued behind the four
	giveUp()
	if err := <-goneErr; !errors.Is(err, context.Canceled) {
		t.Fatalf("start whose caller gave up: %v", err)
	}
	close(release)
	for i, ch := range append(first, kept) {
		if err := <-ch; err != nil {
			t.Fatalf("start %d: %v", i, err)
		}
	}
	if _, err := e.worker.Get(ctx, "kept"); err != nil {
		t.Fatalf("the queued start's run: %v", err)
	}
	if _, err := e.worker.Get(ctx, "gone"); !errors.Is(err, trellis.ErrRunNotFound) {
		t.Fatalf("the start whose caller gave up was sent: %v", err)
	}

	// Four requests in flight again, at a second door; a fifth start queues;
	// closing the client fails it.
	release2 := make(chan struct{})
	mu.Lock()
	held = 0
	mu.Unlock()
	door2 := door(release2)
	defer door2.Close()
	c2, err := trellis.Open(ctx, trellis.Config{Server: door2.URL, Token: "producer"})
	if err != nil {
		t.Fatal(err)
	}
	start2 := func(id string) chan error { return startOn(ctx, c2, id) }
	var second []chan error
	for i := range 4 {
		second = append(second, start2(fmt.Sprintf("second-%d", i)))
	}
	waitHeld(4)
	queued := start2("queued")
	time.Sleep(50 * time.Millisecond)
	if err := c2.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-queued; !errors.Is(err, trellis.ErrClosed) {
		t.Fatalf("queued start after Close: %v, want ErrClosed", err)
	}
	close(release2)
	for _, ch := range second {
		<-ch // answered or failed: their requests were sent before Close
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestGoClientStartManyKeepsOptions starts a batch through the Go client's
// StartMany on a server: every option of an item reaches the stored run, and
// the concurrency key (which the remote StartMany once dropped) counts: with a
// key limit of 1 on the queue, one of two runs with the same key is claimed.
func TestGoClientStartManyKeepsOptions(t *testing.T) {
	e := newEnv(t, storeURLs(t)["sqlite"](t))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := trellis.Open(ctx, trellis.Config{Server: e.base, Token: "admin"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	one := 1
	if _, err := c.CreateQueue(ctx, "keyed", trellis.QueueSettings{KeyLimit: &one}); err != nil {
		t.Fatal(err)
	}
	keyed := trellis.StartOptions{Queue: "keyed", Priority: 3, ConcurrencyKey: "customer-7"}
	res, err := c.StartMany(ctx, []trellis.StartRequest{
		{Workflow: "keyed-go", Input: []byte(`1`), Options: keyed},
		{Workflow: "keyed-go", Input: []byte(`2`), Options: keyed},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 2 || !res[0].Created || !res[1].Created {
		t.Fatalf("StartMany = %+v, want two created runs", res)
	}
	for i, r := range res {
		run, err := e.st.RunGet(ctx, &store.RunGetParams{Namespace: "default", Ref: r.Run.ID})
		if err != nil {
			t.Fatal(err)
		}
		if run.Queue != "keyed" || run.Priority != 3 || string(run.Input) != strconv.Itoa(i+1) {
			t.Fatalf("run %d: queue %q, priority %d, input %s; want keyed, 3, %d", i, run.Queue, run.Priority, run.Input, i+1)
		}
	}
	claimed, err := e.st.RunsClaim(ctx, &store.RunsClaimParams{Namespace: "default", Workflows: []string{"keyed-go"},
		Worker: "w", Max: 10, LeaseDuration: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if len(claimed.Runs) != 1 {
		t.Fatalf("claimed %d runs with one concurrency key and a key limit of 1, want 1", len(claimed.Runs))
	}
}
