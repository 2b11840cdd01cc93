package server

// The tests open Postgres stores by URL (TRELLIS_TEST_STORE=postgres); a
// program that embeds the server imports the driver as it would for
// trellis.Open.
import _ "github.com/trellis-dev/trellis/store/storepg"
