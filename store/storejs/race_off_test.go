//go:build !race

package storejs

// raceEnabled: the tests run with the race detector.
const raceEnabled = false
