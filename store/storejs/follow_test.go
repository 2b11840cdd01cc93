package storejs

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/trellis-dev/trellis/store"
)

// A follower that cannot make a consumer to read the log with (JetStream's
// meta group electing its leader; here every creation times out) still
// applies the log, asking the stream's leader for each record.
func TestFollowerAppliesTheLogWithoutAConsumer(t *testing.T) {
	defer func(d time.Duration) { consumerTimeout = d }(consumerTimeout)
	consumerTimeout = time.Nanosecond
	ctx := context.Background()
	a, b := writerAndFollower(t, nil)
	for i := range 3 {
		id := fmt.Sprint("r", i)
		if err := createRun(ctx, view(a), id); err != nil {
			t.Fatal(err)
		}
		waitApplied(t, b, a.appliedSeq(), 10*time.Second)
		if _, err := b.rep.RunGet(ctx, &store.RunGetParams{Namespace: "default", Ref: id}); err != nil {
			t.Fatalf("b's replica after applying the log: %v", err)
		}
	}
}
