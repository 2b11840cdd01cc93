package retention

import (
	"context"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/trellis-dev/trellis/internal/clock"
	"github.com/trellis-dev/trellis/store"
	"github.com/trellis-dev/trellis/store/storesqlite"
)

// The purger deletes audit entries older than their namespace's retention
// period, and the entries of no namespace after the longest period of any
// namespace, in batches; it keeps the rest.
func TestPurgerDeletesExpiredAuditEntries(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	clk := clock.NewFake(now)
	st, err := storesqlite.Open(ctx, storesqlite.Config{Path: filepath.Join(t.TempDir(), "t.db"), Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	day := 24 * time.Hour
	for name, keep := range map[string]time.Duration{"short": day, "long": 60 * day} {
		if _, err := st.NamespaceCreate(ctx, &store.NamespaceCreateParams{Name: name, Retention: store.Duration(keep)}); err != nil {
			t.Fatal(err)
		}
	}
	entry := func(ns, id string, age time.Duration) store.AuditEntry {
		return store.AuditEntry{Time: now.Add(-age), Principal: "p", Action: "run.cancel", Outcome: "ok",
			Target: store.AuditTarget{Namespace: ns, Type: "run", ID: id}}
	}
	entries := []store.AuditEntry{
		entry("short", "short-old-1", 2*day), entry("short", "short-old-2", 3*day), entry("short", "short-old-3", 2*day),
		entry("short", "short-young", 12*time.Hour),
		entry("norecord", "norecord-old", 31*day), entry("norecord", "norecord-young", 20*day),
		entry("long", "long-young", 59*day),
		entry("", "global-old", 61*day), entry("", "global-young", 45*day),
	}
	if err := st.AuditAppend(ctx, &store.AuditAppendParams{Entries: entries}); err != nil {
		t.Fatal(err)
	}
	p := New(Config{Store: st, Clock: clk, AuditBatch: 2, Duty: 1})
	if err := p.passAudit(ctx); err != nil {
		t.Fatal(err)
	}
	if n := p.AuditDeleted(); n != 5 {
		t.Errorf("deleted %d entries, want 5", n)
	}
	res, err := st.AuditList(ctx, &store.AuditListParams{})
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, en := range res.Entries {
		left = append(left, en.Target.ID)
	}
	slices.Sort(left)
	want := []string{"global-young", "long-young", "norecord-young", "short-young"}
	if !slices.Equal(left, want) {
		t.Errorf("entries left %v, want %v", left, want)
	}
}
