//go:build race

package main

// raceEnabled: the test binary (and so the `trellis server` processes the
// tests start from it) is built with the race detector, many times slower at
// moving bytes.
const raceEnabled = true
