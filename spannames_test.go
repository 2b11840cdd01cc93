package trellis

import (
	"fmt"
	"testing"
)

// Span names are kept for at most maxSpanNames names; past that they are built
// each time, and every name is right either way.
func TestSpanNamesBounded(t *testing.T) {
	sn := newSpanNames("step ")
	for i := range maxSpanNames + 10 {
		name := fmt.Sprint("item-", i)
		for range 2 {
			if got := sn.get(name); got != "step "+name {
				t.Fatalf("get(%q) = %q", name, got)
			}
		}
	}
	if n := len(*sn.names.Load()); n != maxSpanNames {
		t.Fatalf("%d names kept, want %d", n, maxSpanNames)
	}
}
