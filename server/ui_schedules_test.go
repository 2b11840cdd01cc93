package server

import (
	"context"
	"errors"
	"testing"

	"github.com/trellis-dev/trellis"
)

// uiWalkSchedule gives namespace default a schedule "walk-s" (paused: it starts
// runs only when triggered) for the walk of the UI's routes.
func uiWalkSchedule(t *testing.T, e *env) {
	t.Helper()
	_, err := e.worker.CreateSchedule(context.Background(), "walk-s", trellis.ScheduleSpec{Workflow: "echo", Cron: "@hourly"},
		trellis.CreateScheduleOptions{Paused: true})
	if err != nil && !errors.Is(err, trellis.ErrScheduleExists) {
		t.Fatal(err)
	}
}
