package batch

import (
	"slices"
	"testing"
)

func TestRunTakesWhatIsWaitingUpToMax(t *testing.T) {
	in := make(chan int, 10)
	for i := range 5 {
		in <- i
	}
	quit := make(chan struct{})
	var got [][]int
	done := make(chan struct{})
	go func() {
		defer close(done)
		Run(in, quit, 3, func(b []int) {
			got = append(got, slices.Clone(b))
			if len(got) == 2 {
				close(quit)
			}
		})
	}()
	<-done
	if len(got) != 2 || !slices.Equal(got[0], []int{0, 1, 2}) || !slices.Equal(got[1], []int{3, 4}) {
		t.Fatalf("batches %v, want [[0 1 2] [3 4]]", got)
	}
}
