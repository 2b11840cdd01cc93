package trellis

import (
	"context"
	"net/http"
	"net/url"
	"time"

	"github.com/trellis-dev/trellis/internal/httpc"
)

// The schedule routes of the HTTP API (docs/schedules.md).

// createScheduleBody is the body of POST /schedules (server.CreateScheduleRequest).
type createScheduleBody struct {
	Name   string       `json:"name"`
	Spec   ScheduleSpec `json:"spec"`
	Paused bool         `json:"paused,omitempty"`
}

// backfillBody is the body of POST /schedules/{name}/backfill.
type backfillBody struct {
	Start time.Time `json:"start"`
	End   time.Time `json:"end"`
}

func (r *remote) schedulePath(name string, tail ...string) string {
	p := r.ns + "/schedules/" + url.PathEscape(name)
	for _, t := range tail {
		p += "/" + t
	}
	return p
}

func (r *remote) createSchedule(ctx context.Context, name string, spec ScheduleSpec, o CreateScheduleOptions) (*Schedule, error) {
	var sc Schedule
	body := createScheduleBody{Name: name, Spec: spec, Paused: o.Paused}
	if _, err := r.do(ctx, httpc.Call{Method: http.MethodPost, Path: r.ns + "/schedules", Body: body, Out: &sc}); err != nil {
		return nil, err
	}
	return &sc, nil
}

func (r *remote) getSchedule(ctx context.Context, name string) (*Schedule, error) {
	var sc Schedule
	if _, err := r.do(ctx, httpc.Call{Method: http.MethodGet, Path: r.schedulePath(name), Out: &sc}); err != nil {
		return nil, err
	}
	return &sc, nil
}

func (r *remote) listSchedules(ctx context.Context) ([]*Schedule, error) {
	var l struct {
		Schedules []*Schedule `json:"schedules"`
	}
	if _, err := r.do(ctx, httpc.Call{Method: http.MethodGet, Path: r.ns + "/schedules", Out: &l}); err != nil {
		return nil, err
	}
	return l.Schedules, nil
}

func (r *remote) updateSchedule(ctx context.Context, name string, spec ScheduleSpec) (*Schedule, error) {
	var sc Schedule
	if _, err := r.do(ctx, httpc.Call{Method: http.MethodPut, Path: r.schedulePath(name), Body: spec, Out: &sc}); err != nil {
		return nil, err
	}
	return &sc, nil
}

func (r *remote) pauseSchedule(ctx context.Context, name string, paused bool) (*Schedule, error) {
	action := "resume"
	if paused {
		action = "pause"
	}
	var sc Schedule
	if _, err := r.do(ctx, httpc.Call{Method: http.MethodPost, Path: r.schedulePath(name, action), Out: &sc}); err != nil {
		return nil, err
	}
	return &sc, nil
}

func (r *remote) deleteSchedule(ctx context.Context, name string) error {
	_, err := r.do(ctx, httpc.Call{Method: http.MethodDelete, Path: r.schedulePath(name)})
	return err
}

func (r *remote) triggerSchedule(ctx context.Context, name string) (*Run, error) {
	var run Run
	if _, err := r.do(ctx, httpc.Call{Method: http.MethodPost, Path: r.schedulePath(name, "trigger"), Out: &run}); err != nil {
		return nil, err
	}
	return &run, nil
}

func (r *remote) backfillSchedule(ctx context.Context, name string, start, end time.Time) ([]*Run, error) {
	var l struct {
		Runs []*Run `json:"runs"`
	}
	body := backfillBody{Start: start.UTC(), End: end.UTC()}
	if _, err := r.do(ctx, httpc.Call{Method: http.MethodPost, Path: r.schedulePath(name, "backfill"), Body: body, Out: &l}); err != nil {
		return nil, err
	}
	return l.Runs, nil
}
