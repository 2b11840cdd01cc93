package storepg_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-dev/trellis/internal/pgtest"
	"github.com/trellis-dev/trellis/internal/pgtest/pgstore"
	"github.com/trellis-dev/trellis/store"
	"github.com/trellis-dev/trellis/store/storepg"
)

func subscribe(t *testing.T, s store.Store, topic string) (<-chan struct{}, func()) {
	t.Helper()
	ch, stop, err := s.Subscribe(t.Context(), topic)
	if err != nil {
		t.Fatalf("Subscribe(%s): %v", topic, err)
	}
	return ch, stop
}

func TestParseURL(t *testing.T) {
	t.Parallel()
	cfg, err := storepg.ParseURL("postgresql://u:secret@h:5433/db?sslmode=disable&schema=app_1&max_batch=9")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Schema != "app_1" || cfg.MaxBatch != 9 || strings.Contains(cfg.URL, "schema") ||
		!strings.Contains(cfg.URL, "sslmode=disable") {
		t.Fatalf("ParseURL = %+v", cfg)
	}
	for _, bad := range []string{
		"mysql://h/db", "postgres://h/db?schema=Bad-Name", "postgres://h/db?schema=a&schema=b",
		"postgres://h/db?max_batch=0", "postgres://u:secret@h/db?schema=1x",
	} {
		_, err := storepg.ParseURL(bad)
		if err == nil {
			t.Fatalf("ParseURL(%q) succeeded", bad)
		}
		if strings.Contains(err.Error(), "secret") {
			t.Fatalf("ParseURL error shows the password: %v", err)
		}
	}
	_, err = storepg.Open(context.Background(), storepg.Config{})
	if !errors.Is(err, store.ErrInvalidParams) {
		t.Fatalf("Open without URL: %v, want ErrInvalidParams", err)
	}
}

// Many processes opening a new schema at once: one migrates, the others wait.
func TestConcurrentOpenMigratesOnce(t *testing.T) {
	t.Parallel()
	url := pgtest.SchemaURL(t)
	var wg sync.WaitGroup
	for range 6 {
		wg.Go(func() { pgstore.Open(t, url, nil) })
	}
	wg.Wait()
	s := pgstore.Open(t, url, nil)
	if err := s.Migrate(t.Context()); err != nil {
		t.Fatalf("Migrate again: %v", err)
	}
}

// A store is woken by another store's commits (another process, in production)
// through LISTEN/NOTIFY.
func TestNotifyAcrossStores(t *testing.T) {
	t.Parallel()
	url := pgtest.SchemaURL(t)
	a, b := pgstore.Open(t, url, nil), pgstore.Open(t, url, nil)
	ready, stop := subscribe(t, b, store.TopicReady)
	defer stop()
	runTopic, stop2 := subscribe(t, b, store.RunTopic("ns", "r1"))
	defer stop2()
	create(t, a, "r1")
	waitSignal(t, "TopicReady from another store", ready)
	waitSignal(t, "run topic from another store", runTopic)
	if _, err := a.RunCancel(t.Context(), &store.RunCancelParams{Namespace: "ns", Ref: "r1"}); err != nil {
		t.Fatal(err)
	}
	waitSignal(t, "run topic after another store's cancel", runTopic)
}

// When the listener's connection is killed, the store reconnects, signals every
// subscriber (notifications may have been missed) and receives notifications again.
func TestListenerReconnects(t *testing.T) {
	t.Parallel()
	url := pgtest.SchemaURL(t)
	a, b := pgstore.Open(t, url, nil), pgstore.Open(t, url, nil)
	ready, stop := subscribe(t, b, store.TopicReady)
	defer stop()
	conn, err := pgx.Connect(t.Context(), pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	// Every LISTEN connection of this schema's channel (a's and b's).
	tag, err := conn.Exec(t.Context(), `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE query = 'LISTEN "trellis.'||$1||'"'`, schemaOf(t, url))
	if err != nil || tag.RowsAffected() != 2 {
		t.Fatalf("terminating listeners: %v (%d)", err, tag.RowsAffected())
	}
	waitSignal(t, "wake-all after reconnect", ready)
	deadline := time.Now().Add(10 * time.Second)
	for i := 0; ; i++ { // notifications flow again once b has re-LISTENed
		create(t, a, "after-"+string(rune('a'+i)))
		select {
		case <-ready:
			return
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("no notification after the listener reconnected")
		}
	}
}

// A checkpoint with a stale token in a group-committed batch fails alone.
func TestBatchRejectsStaleAlone(t *testing.T) {
	t.Parallel()
	s := pgstore.Open(t, pgtest.SchemaURL(t), nil)
	ctx := t.Context()
	for i := range 40 {
		create(t, s, "b"+string(rune('A'+i)))
	}
	res, err := s.RunsClaim(ctx, &store.RunsClaimParams{Namespace: "ns", Workflows: []string{"wf"}, Worker: "w", Max: 40, LeaseDuration: time.Minute})
	if err != nil || len(res.Runs) != 40 {
		t.Fatalf("claim: %v, %d runs", err, len(res.Runs))
	}
	before := s.Stats()
	errs := make([]error, len(res.Runs))
	var wg sync.WaitGroup
	for i, cr := range res.Runs {
		token := cr.LeaseToken
		if i%10 == 0 {
			token-- // stale
		}
		wg.Go(func() {
			_, errs[i] = s.Checkpoint(ctx, &store.CheckpointParams{
				Lease:  store.Lease{Namespace: "ns", RunID: cr.Run.ID, Token: token},
				Status: store.StatusSucceeded, KV: []store.KVWrite{{Key: "k", Value: []byte("v")}},
			})
		})
	}
	wg.Wait()
	for i, err := range errs {
		if want := i%10 == 0; want != errors.Is(err, store.ErrLeaseLost) {
			t.Fatalf("checkpoint %d: %v (stale: %v)", i, err, want)
		}
	}
	after := s.Stats()
	t.Logf("%d checkpoints in %d transactions", after.Requests-before.Requests, after.Transactions-before.Transactions)
}

func create(t *testing.T, s store.Store, id string) {
	t.Helper()
	_, err := s.RunCreate(t.Context(), &store.RunCreateParams{Namespace: "ns", ID: id, WorkflowID: id, Workflow: "wf", Queue: "q"})
	if err != nil {
		t.Fatal(err)
	}
}

func waitSignal(t *testing.T, what string, ch <-chan struct{}) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: no signal", what)
	}
}

func schemaOf(t *testing.T, url string) string {
	cfg, err := storepg.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	return cfg.Schema
}
