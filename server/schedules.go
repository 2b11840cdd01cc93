package server

import (
	"fmt"
	"net/http"
	"time"

	"github.com/trellis-dev/trellis"
	"github.com/trellis-dev/trellis/store"
)

// Request bodies of the schedule routes.
type (
	// CreateScheduleRequest creates a schedule.
	CreateScheduleRequest struct {
		Name   string               `json:"name"`
		Spec   trellis.ScheduleSpec `json:"spec"`
		Paused bool                 `json:"paused,omitempty"`
	}
	// BackfillRequest names the ticks a backfill starts: those in [start, end).
	BackfillRequest struct {
		Start time.Time `json:"start"`
		End   time.Time `json:"end"`
	}
)

// scheduleName reads and checks the {name} of a schedule route.
func scheduleName(r *http.Request) (string, error) {
	name := r.PathValue("name")
	return name, checkRef("schedule name", name)
}

func (s *Server) listSchedules(w http.ResponseWriter, r *http.Request, c *call) error {
	list, err := c.client.ListSchedules(r.Context())
	if err != nil {
		return err
	}
	writeJSON(w, 200, ScheduleList{Schedules: list})
	return nil
}

func (s *Server) createSchedule(w http.ResponseWriter, r *http.Request, c *call) error {
	var req CreateScheduleRequest
	if err := decodeBody(w, r, s.cfg.MaxBodyBytes, false, &req); err != nil {
		return err
	}
	if err := store.ValidateName("schedule", req.Name); err != nil {
		return err
	}
	if err := checkSpecNames(req.Spec); err != nil {
		return err
	}
	c.noteTarget(req.Name)
	sc, err := c.client.CreateSchedule(r.Context(), req.Name, req.Spec, trellis.CreateScheduleOptions{Paused: req.Paused})
	if err != nil {
		return err
	}
	reply(w, c, 201, sc)
	return nil
}

// checkSpecNames checks the names a schedule's spec holds, before the client
// looks its workflow up (the store checks them again).
func checkSpecNames(spec trellis.ScheduleSpec) error {
	if err := store.ValidateName("workflow", spec.Workflow); err != nil {
		return err
	}
	if spec.Queue == "" {
		return nil // the namespace's default queue
	}
	return store.ValidateName("queue", spec.Queue)
}

func (s *Server) getSchedule(w http.ResponseWriter, r *http.Request, c *call) error {
	name, err := scheduleName(r)
	if err != nil {
		return err
	}
	sc, err := c.client.GetSchedule(r.Context(), name)
	if err != nil {
		return err
	}
	writeJSON(w, 200, sc)
	return nil
}

func (s *Server) updateSchedule(w http.ResponseWriter, r *http.Request, c *call) error {
	name, err := scheduleName(r)
	if err != nil {
		return err
	}
	var spec trellis.ScheduleSpec
	if err := decodeBody(w, r, s.cfg.MaxBodyBytes, false, &spec); err != nil {
		return err
	}
	if err := checkSpecNames(spec); err != nil {
		return err
	}
	sc, err := c.client.UpdateSchedule(r.Context(), name, spec)
	if err != nil {
		return err
	}
	reply(w, c, 200, sc)
	return nil
}

func (s *Server) deleteSchedule(w http.ResponseWriter, r *http.Request, c *call) error {
	name, err := scheduleName(r)
	if err != nil {
		return err
	}
	if err := c.client.DeleteSchedule(r.Context(), name); err != nil {
		return err
	}
	reply(w, c, 204, nil)
	return nil
}

func (s *Server) pauseSchedule(w http.ResponseWriter, r *http.Request, c *call) error {
	return s.setPaused(w, r, c, true)
}

func (s *Server) resumeSchedule(w http.ResponseWriter, r *http.Request, c *call) error {
	return s.setPaused(w, r, c, false)
}

func (s *Server) setPaused(w http.ResponseWriter, r *http.Request, c *call, paused bool) error {
	name, err := scheduleName(r)
	if err != nil {
		return err
	}
	var empty struct{}
	if err := decodeBody(w, r, s.cfg.MaxBodyBytes, true, &empty); err != nil {
		return err
	}
	var sc *trellis.Schedule
	if paused {
		sc, err = c.client.PauseSchedule(r.Context(), name)
	} else {
		sc, err = c.client.ResumeSchedule(r.Context(), name)
	}
	if err != nil {
		return err
	}
	reply(w, c, 200, sc)
	return nil
}

func (s *Server) triggerSchedule(w http.ResponseWriter, r *http.Request, c *call) error {
	name, err := scheduleName(r)
	if err != nil {
		return err
	}
	var empty struct{}
	if err := decodeBody(w, r, s.cfg.MaxBodyBytes, true, &empty); err != nil {
		return err
	}
	run, err := c.client.TriggerSchedule(r.Context(), name)
	if err != nil {
		return err
	}
	c.noteDetail("run %s", run.ID)
	reply(w, c, 201, run)
	return nil
}

func (s *Server) backfillSchedule(w http.ResponseWriter, r *http.Request, c *call) error {
	name, err := scheduleName(r)
	if err != nil {
		return err
	}
	var req BackfillRequest
	if err := decodeBody(w, r, s.cfg.MaxBodyBytes, false, &req); err != nil {
		return err
	}
	if req.Start.IsZero() || req.End.IsZero() {
		return fmt.Errorf("%w: start and end are required (RFC 3339 times)", ErrInvalidArgument)
	}
	runs, err := c.client.BackfillSchedule(r.Context(), name, req.Start, req.End)
	if err != nil {
		return err
	}
	c.noteDetail("%d runs", len(runs))
	reply(w, c, 200, trellis.BackfillResult{Runs: runs})
	return nil
}
