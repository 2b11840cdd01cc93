package pgstore_test

import (
	"context"
	"testing"

	"github.com/trellis-dev/trellis/internal/pgtest"
	"github.com/trellis-dev/trellis/internal/pgtest/pgstore"
	"github.com/trellis-dev/trellis/store"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// A schema handed out by ReusedSchemaURL is emptied after its test and handed
// to the next one, which finds a fresh store's rows: no runs, and the default
// namespace the migrations write. (Emptying failed for every schema once, and
// the suites silently created each one again: twice their run time.)
func TestReusedSchemaIsEmptiedAndReused(t *testing.T) {
	ctx := context.Background()
	var first string
	t.Run("use", func(t *testing.T) {
		first = pgtest.ReusedSchemaURL(t)
		s := pgstore.Open(t, first, nil)
		p := &store.RunCreateParams{Namespace: "default", ID: "r1", WorkflowID: "r1", Workflow: "w", Queue: "default", Input: []byte(`{}`)}
		if _, err := s.RunCreate(ctx, p); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("reuse", func(t *testing.T) {
		url := pgtest.ReusedSchemaURL(t)
		if url != first {
			t.Fatalf("got schema URL %s, want the emptied one %s", url, first)
		}
		s := pgstore.Open(t, url, nil)
		if _, err := s.RunGet(ctx, &store.RunGetParams{Namespace: "default", Ref: "r1"}); err == nil {
			t.Fatal("the reused schema still holds the first test's run")
		}
		ns, err := s.NamespaceGet(ctx, &store.NamespaceGetParams{Name: "default"})
		if err != nil || ns.Name != "default" {
			t.Fatalf("NamespaceGet(default) on the reused schema = %+v, %v; want the default namespace", ns, err)
		}
	})
}
