package notify

import "testing"

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
