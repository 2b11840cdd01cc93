package example

import (
	"context"
	crand "crypto/rand"
	"maps"
	"math/rand"
	randv2 "math/rand/v2"
	"os"
	"slices"
	"time"

	"github.com/trellis-dev/trellis"
)

// order is a workflow: everything nondeterministic in it is reported.
func order(wc *trellis.Context, id string) (string, error) {
	start := time.Now()                // want `time.Now in a workflow reads the wall clock, which differs on replay: use wc.Now\(\)`
	_ = time.Since(start)              // want `use wc.Now\(\).Sub\(t\)`
	time.Sleep(time.Second)            // want `use wc.Sleep\(d\), a durable timer`
	<-time.After(time.Second)          // want `use wc.NewTimer\(d\)`
	_ = rand.Intn(10)                  // want `rand.Intn in a workflow draws another number on replay: use wc.Random\(\)`
	_ = randv2.N(10)                   // want `rand.N in a workflow draws another number on replay`
	r := rand.New(rand.NewSource(1))   // want `rand.New in a workflow` `rand.NewSource in a workflow`
	_ = r.Intn(3)                      // a method of a generator: its creation is what is reported
	_ = os.Getenv("REGION")            // want `os.Getenv in a workflow may read another value on replay.*trellis.Step`
	_, _ = crand.Read(make([]byte, 4)) // want `crypto/rand in a workflow draws other bytes on replay: use wc.Random\(\) or wc.UUID\(\)`
	go func() {}()                     // want `a go statement in a workflow runs code outside the replay.*trellis.Async`
	ch := make(chan int)
	select { // want `a select statement in a workflow.*trellis.Select`
	case <-ch:
	default:
	}
	m := map[string]int{"a": 1}
	for k := range m { // want `ranging over a map in a workflow.*slices.Sorted\(maps.Keys\(m\)\)`
		_ = k
	}
	//trellis:deterministic (the sum does not depend on the order)
	for _, v := range m {
		_ = v
	}
	for _, v := range m { //trellis:deterministic
		_ = v
	}
	for range []int{1, 2} { // a slice: its order is fixed
	}
	for k := range maps.Keys(m) { // want `ranging over maps.Keys in a workflow visits the map in an order that differs on replay`
		_ = k
	}
	for _, k := range slices.Sorted(maps.Keys(m)) { // sorted: its order is fixed
		_ = k
	}
	func() {
		_ = time.Now() // want `time.Now in a workflow`
	}()

	// Steps may do all of this: their results are recorded.
	_, _ = trellis.Step(wc, "stamp", func(ctx context.Context) (time.Time, error) {
		time.Sleep(time.Millisecond)
		return time.Now(), nil
	})
	_ = trellis.Async(wc, "draw", func(ctx context.Context) (int, error) { return rand.Intn(6), nil })
	_, _ = trellis.TxStep(wc, "tx", func(ctx context.Context, tx any) (string, error) { return os.Getenv("X"), nil })
	_, _ = trellis.Step(wc, "named", fetch)

	_ = wc.Now()
	_ = wc.Sleep(time.Second)
	return helper(wc), nil
}

// helper takes the workflow's context: it is part of the workflow.
func helper(wc *trellis.Context) string {
	return time.Now().String() // want `time.Now in a workflow`
}

// fetch is a step function: it is not checked.
func fetch(ctx context.Context) (string, error) {
	time.Sleep(time.Millisecond)
	return time.Now().String(), nil
}

// plain is ordinary code: it is not checked.
func plain() {
	_ = time.Now()
	go func() {}()
}

var workflow = trellis.NewWorkflow("order", order)

var inline = trellis.NewWorkflow("inline", func(wc *trellis.Context, n int) (int, error) {
	return rand.Intn(n), nil // want `rand.Intn in a workflow`
})
