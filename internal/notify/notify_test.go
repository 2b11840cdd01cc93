package notify

import (
	"context"
	"runtime"
	"testing"
)

func TestHubCoalescesAndUnsubscribes(t *testing.T) {
	t.Parallel()
	var h Hub
	ch, cancel := h.Subscribe("a")
	other, cancelOther := h.Subscribe("b")
	defer cancelOther()
	h.Publish("a")
	h.Publish("a")
	select {
	case <-ch:
	default:
		t.Fatal("no signal after publish")
	}
	select {
	case <-ch:
		t.Fatal("signals did not coalesce")
	default:
	}
	select {
	case <-other:
		t.Fatal("signal leaked to another topic")
	default:
	}
	cancel()
	cancel()
	h.Publish("a")
	select {
	case <-ch:
		t.Fatal("signal after cancel")
	default:
	}
	if len(h.subs["a"]) != 0 {
		t.Fatal("subscription not removed")
	}
}

func TestSubscribeContextEndsWithTheContext(t *testing.T) {
	t.Parallel()
	var h Hub
	ctx, cancel := context.WithCancel(context.Background())
	ch, stop := h.SubscribeContext(ctx, "a")
	defer stop()
	cancel()
	// AfterFunc runs the unsubscription on its own goroutine: wait until the hub
	// has no subscriber left (bounded by the test's deadline).
	for {
		h.mu.Lock()
		n := len(h.subs["a"])
		h.mu.Unlock()
		if n == 0 {
			break
		}
		runtime.Gosched()
	}
	h.Publish("a")
	select {
	case <-ch:
		t.Fatal("signal after the context ended")
	default:
	}
}
