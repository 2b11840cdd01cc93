package trellis

// Package trellis links only the SQLite driver. The tests also run on Postgres
// (TRELLIS_TEST_STORE=postgres), run remote workers (Config.Server) and export
// traces (TracerFromEnv): they import what a program doing so imports.
import (
	_ "github.com/trellis-dev/trellis/otlp"
	_ "github.com/trellis-dev/trellis/store/storepg"
	_ "github.com/trellis-dev/trellis/store/storeremote"
)
