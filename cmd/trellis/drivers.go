package main

// The command serves every store and exporter the docs name: package trellis
// links only the SQLite driver, and leaves the others to the programs that
// import them.
import (
	_ "github.com/trellis-dev/trellis/otlp"          // TracerFromEnv's OTLP exporters (trellis server, dev)
	_ "github.com/trellis-dev/trellis/store/storejs" // jetstream: and nats:// store URLs
	_ "github.com/trellis-dev/trellis/store/storepg" // postgres:// store URLs
)
