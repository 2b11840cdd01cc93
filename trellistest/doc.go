// Package trellistest is the test kit for Trellis workflows.
//
// New opens an Env: a trellis.Client with its worker on a temporary SQLite file,
// whose clock is a fake that moves only when the test moves it. A workflow that
// sleeps for a day and waits an hour for an event runs in milliseconds of wall
// time: Advance moves the clock and waits for what came due, SendEvent, Approve
// and Reject give a run what it waits for, and Result skips time until the run
// is finished. Every sleep and retry backoff waits in the store, so nothing
// happens between two moves of the clock but what the test starts.
//
// OverrideStep (or Options.Steps) replaces a step's function by the step's name,
// the way Temporal's test suite mocks activities; History returns the ops a run
// recorded, to assert on.
//
// Replay replays a history exported from a real run (`trellis runs history RUN
// --json`, the trellis.history/v1 format of docs/history-format.md) against
// today's workflow code, with no store: a change that would break the runs in
// flight fails with the engine's *trellis.NonDeterminismError.
package trellistest
