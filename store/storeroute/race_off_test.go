//go:build !race

package storeroute_test

// raceEnabled: the tests run with the race detector.
const raceEnabled = false
