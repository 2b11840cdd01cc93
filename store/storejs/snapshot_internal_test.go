package storejs

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// TestReaderTellsCompactionFromLoss: a reader that starts below the
// compacted log's first sequence fails with errBehind, not as corruption;
// one that starts after it reads on.
func TestReaderTellsCompactionFromLoss(t *testing.T) {
	ctx := context.Background()
	srv := startNATS(t, t.TempDir())
	js, err := jetstream.New(connectTo(t, srv))
	if err != nil {
		t.Fatal(err)
	}
	l, err := openLog(ctx, js, "gap", 1, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		if _, err := l.appendRecord(ctx, []byte{byte(i)}, uint64(i), 1); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.purgeThrough(ctx, 5); err != nil {
		t.Fatal(err)
	}
	if first, last, err := l.bounds(ctx); err != nil || first != 6 || last != 10 {
		t.Fatalf("bounds after compaction: %d..%d %v, want 6..10", first, last, err)
	}
	read := func(from uint64) (entry, error) {
		r, err := l.readFrom(ctx, from)
		if err != nil {
			t.Fatal(err)
		}
		defer r.stop()
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		return r.nextRecord(rctx, 10)
	}
	_, err = read(3)
	if !errors.Is(err, errBehind) || errors.Is(err, errCorrupt) {
		t.Fatalf("reading from a compacted sequence: %v, want errBehind", err)
	}
	if !strings.Contains(err.Error(), "starts at 6") {
		t.Errorf("error %q does not say where the log starts", err)
	}
	e, err := read(6)
	if err != nil || e.seq != 6 || e.data[0] != 5 {
		t.Fatalf("reading from the first kept sequence: %v %v", e, err)
	}
}

func TestParseURLSnapshotSettings(t *testing.T) {
	c, err := ParseURL("jetstream:///d?snapshot_every=500&snapshot_interval=10m&compact_margin=20")
	if err != nil {
		t.Fatal(err)
	}
	if c.SnapshotEvery != 500 || c.SnapshotInterval != 10*time.Minute || c.CompactMargin != 20 {
		t.Errorf("parsed %d %s %d", c.SnapshotEvery, c.SnapshotInterval, c.CompactMargin)
	}
	c, err = ParseURL("nats://h1/N?snapshot_every=off&snapshot_interval=off&compact_margin=off")
	if err != nil {
		t.Fatal(err)
	}
	if c.SnapshotEvery != -1 || c.SnapshotInterval != -1 || c.CompactMargin != -1 {
		t.Errorf("off parsed as %d %s %d", c.SnapshotEvery, c.SnapshotInterval, c.CompactMargin)
	}
	d := Config{Dir: "/d"}.withDefaults()
	if d.SnapshotEvery != DefaultSnapshotEvery || d.SnapshotInterval != DefaultSnapshotInterval || d.CompactMargin != DefaultCompactMargin {
		t.Errorf("defaults %d %s %d", d.SnapshotEvery, d.SnapshotInterval, d.CompactMargin)
	}
	for _, bad := range []string{"snapshot_every=0", "snapshot_every=-5", "snapshot_every=many",
		"snapshot_interval=0s", "snapshot_interval=-1m", "snapshot_interval=soon", "compact_margin=0", "compact_margin=x"} {
		_, err := ParseURL("jetstream:///d?" + bad)
		key, _, _ := strings.Cut(bad, "=")
		if err == nil || !strings.Contains(err.Error(), key) {
			t.Errorf("%s: %v, want an error naming %s", bad, err, key)
		}
	}
}
