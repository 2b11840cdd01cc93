package notify

import (
	"slices"
	"testing"
)

func TestFeedCollectsEveryTopicOfItsPrefix(t *testing.T) {
	t.Parallel()
	var h Hub
	f := h.Feed("run:ns/")
	h.Publish("run:ns/a", "ready", "run:other/b")
	h.Publish("run:ns/c", "run:ns/a")
	select {
	case <-f.Changed():
	default:
		t.Fatal("no signal after publish")
	}
	got, all := f.Take()
	slices.Sort(got)
	if !slices.Equal(got, []string{"a", "c"}) || all {
		t.Fatalf("Take() = %v, %v; want [a c], false", got, all)
	}
	if got, _ := f.Take(); len(got) != 0 {
		t.Fatalf("second Take() = %v, want nothing", got)
	}
	h.MarkAll()
	<-f.Changed()
	if got, all := f.Take(); len(got) != 0 || !all {
		t.Fatalf("Take() after MarkAll = %v, %v; want [], true", got, all)
	}
	f.Stop()
	f.Stop()
	h.Publish("run:ns/d")
	if got, _ := f.Take(); len(got) != 0 {
		t.Fatalf("Take() after Stop = %v", got)
	}
}
