package server

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"

	"github.com/trellis-dev/trellis/store"
)

// walkQueue gives namespace default a queue "walk-q" for the walk of the UI's
// routes.
func walkQueue(t *testing.T, e *env) {
	t.Helper()
	ctx := context.Background()
	if _, err := e.st.QueueCreate(ctx, &store.QueueCreateParams{Namespace: "default", Name: "walk-q"}); err != nil && !errors.Is(err, store.ErrQueueExists) {
		t.Fatal(err)
	}
}

// The queues page shows each queue's depth by status, its limits and its
// defaults, and the namespace's default queue without a record; an admin
// pauses and resumes a queue from it; a reader sees no button and is refused
// the form; pausing a paused queue says so and changes nothing.
func TestUIQueues(t *testing.T) {
	for name, url := range storeURLs(t) {
		t.Run(name, func(t *testing.T) { testUIQueues(t, url(t)) })
	}
}

func testUIQueues(t *testing.T, dbURL string) {
	e := newEnv(t, dbURL)
	ctx := context.Background()
	// A namespace without a record (runs can be started in any): its default queue.
	if r := string(e.uiSession("admin").get("/ui/tenant-a/queues").want(t, 200).body); !strings.Contains(r, `data-queue="default"`) {
		t.Fatalf("queues page of a namespace without a record: %.500s", r)
	}
	if _, err := e.st.QueueCreate(ctx, &store.QueueCreateParams{Namespace: "default", Name: "emails",
		QueueSettings: store.QueueSettings{ConcurrencyLimit: ptr(20), KeyLimit: ptr(2),
			Retry: &store.QueueRetry{MaxAttempts: 5, InitialBackoff: store.Duration(1e9)}}}); err != nil {
		t.Fatal(err)
	}
	// Two runs waiting on a paused queue: the depth counts them.
	if _, err := e.st.QueueSetPaused(ctx, &store.QueueSetPausedParams{Namespace: "default", Name: "emails", Paused: true}); err != nil {
		t.Fatal(err)
	}
	e.start("echo", "a", map[string]any{"queue": "emails"})
	e.start("echo", "b", map[string]any{"queue": "emails"})

	admin, reader := e.uiSession("admin"), e.uiSession("reader")
	page := string(admin.get("/ui/default/queues").want(t, 200).body)
	for _, want := range []string{`data-queue="emails"`, `data-queue="default"`, "paused", "concurrency 20", "per key 2",
		"5 attempts, backoff 1s", `/ui/default/runs?queue=emails&amp;status=pending">2<`, "Resume", "none (no record)"} {
		if !strings.Contains(page, want) {
			t.Errorf("queues page lacks %q", want)
		}
	}
	if r := string(reader.get("/ui/default/queues").want(t, 200).body); strings.Contains(r, "-queue\"") || !strings.Contains(r, `data-queue="emails"`) {
		t.Error("a reader sees a pause or resume button")
	}
	if r := reader.post("/ui/default/queues/emails/resume", url.Values{"csrf": {reader.csrf()}}, e.base); r.status != 403 {
		t.Fatalf("a reader's resume: %d", r.status)
	}
	if q, _ := e.st.QueueGet(ctx, &store.QueueGetParams{Namespace: "default", Name: "emails"}); !q.Paused {
		t.Fatal("a reader's refused resume changed the queue")
	}
	if r := admin.post("/ui/default/queues/emails/resume", url.Values{"csrf": {admin.csrf()}}, e.base); r.status != 303 {
		t.Fatalf("resume: %d %.300s", r.status, r.body)
	}
	if q, _ := e.st.QueueGet(ctx, &store.QueueGetParams{Namespace: "default", Name: "emails"}); q.Paused {
		t.Fatal("resume did not resume")
	}
	if r := admin.post("/ui/default/queues/emails/resume", url.Values{"csrf": {admin.csrf()}}, e.base); r.status != 409 || !strings.Contains(string(r.body), "already") {
		t.Fatalf("resuming a queue that is not paused: %d %.300s", r.status, r.body)
	}
	if r := admin.post("/ui/default/queues/emails/pause", url.Values{"csrf": {"forged"}}, e.base); r.status != 403 {
		t.Fatalf("pause with a forged CSRF token: %d", r.status)
	}
	if r := admin.post("/ui/default/queues/nope/pause", url.Values{"csrf": {admin.csrf()}}, e.base); r.status != 404 {
		t.Fatalf("pausing a queue without a record: %d", r.status)
	}
}

func ptr[T any](v T) *T { return &v }
