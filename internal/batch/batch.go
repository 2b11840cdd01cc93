// Package batch is the loop of the stores' group-commit goroutines: take a
// request, add those already waiting behind it, handle them together.
package batch

// Run receives values from in until quit is closed and calls fn with each value
// and the values already waiting behind it, at most max, in arrival order. fn
// must not keep the slice.
func Run[T any](in <-chan T, quit <-chan struct{}, max int, fn func([]T)) {
	b := make([]T, 0, max)
	for {
		select {
		case v := <-in:
			b = collect(in, append(b[:0], v), max)
			fn(b)
			clear(b)
		case <-quit:
			return
		}
	}
}

// collect adds the values already waiting on in, up to max.
func collect[T any](in <-chan T, b []T, max int) []T {
	for len(b) < max {
		select {
		case v := <-in:
			b = append(b, v)
		default:
			return b
		}
	}
	return b
}
