package storepg

import (
	"slices"
	"testing"

	"github.com/trellis-dev/trellis/store"
)

// TestLastOfEachKeepsTheLastWriteOfEachPlace pins what the checkpoint's rows
// keep of several writes to one place: the last, in the order of the writes
// kept.
func TestLastOfEachKeepsTheLastWriteOfEachPlace(t *testing.T) {
	ops := []*store.Op{{Position: 0, Name: "a"}, {Position: 1, Name: "b"}, {Position: 0, Name: "a2"}, {Position: 2, Name: "c"}, {Position: 1, Name: "b2"}}
	var c opCols
	if err := c.add(ops); err != nil {
		t.Fatal(err)
	}
	if want := []string{"a2", "c", "b2"}; !slices.Equal(c.names, want) {
		t.Fatalf("ops kept %v, want %v", c.names, want)
	}
	var kv kvCols
	kv.add([]store.KVWrite{{Key: "x", Value: []byte("1")}, {Key: "y", Delete: true}, {Key: "x", Delete: true}, {Key: "y", Value: []byte("2")}})
	if !slices.Equal(kv.delKeys, []string{"x"}) || !slices.Equal(kv.setKeys, []string{"y"}) || string(kv.vals[0]) != "2" {
		t.Fatalf("kv kept deletes %v, sets %v %q", kv.delKeys, kv.setKeys, kv.vals)
	}
	var one opCols
	if err := one.add(ops[:1]); err != nil || !slices.Equal(one.names, []string{"a"}) {
		t.Fatalf("one op: %v, %v", one.names, err)
	}
}
