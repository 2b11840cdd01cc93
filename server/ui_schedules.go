package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/trellis-dev/trellis"
	"github.com/trellis-dev/trellis/internal/auth"
	"github.com/trellis-dev/trellis/store"
)

// The schedules page, /ui/{ns}/schedules (docs/schedules.md): the
// namespace's schedules, a form that creates one, and per schedule Pause or
// Resume and Trigger now, each under the rule of the API's route that does
// the same (readers see, producers trigger, admins create, pause and resume;
// all on the namespace as a whole). A refused form shows the page again with
// what was typed and why, and changes nothing.

// uiOverlaps are the overlap policies the create form offers, the default first.
var uiOverlaps = []trellis.Overlap{trellis.OverlapSkip, trellis.OverlapBufferOne, trellis.OverlapAllowAll, trellis.OverlapCancelPrevious}

type scheduleRow struct {
	S        *trellis.Schedule
	NextFire string // "in 4m10s (2026-…)", or why there is none
	LastRun  link
}

// scheduleForm is what the create form holds.
type scheduleForm struct {
	Name, Workflow, Cron, TimeZone, Queue, Input, Overlap string
	Paused                                                bool
}

type schedulesData struct {
	Schedules             []scheduleRow
	CanManage, CanTrigger bool
	Form                  scheduleForm
	FormError             string // the create form's refusal
	Error                 string // a pause, resume or trigger's refusal
	Notice                string
	NoticeLink            link
	Overlaps              []trellis.Overlap
	Workflows             []string // served now: the form's suggestions
}

func (s *Server) uiSchedules(w http.ResponseWriter, r *http.Request, c *uiCall) error {
	d := &schedulesData{Form: scheduleForm{TimeZone: "UTC"}}
	q := r.URL.Query()
	switch {
	case q.Get("created") != "":
		d.Notice = "Created schedule " + q.Get("created") + "."
	case q.Get("triggered") != "":
		id := q.Get("triggered")
		d.Notice = "Triggered: started run"
		d.NoticeLink = link{Href: c.runHref(id, q.Get("queue")), Text: id}
	}
	return s.renderSchedules(w, r, c, 200, d)
}

// renderSchedules fills d with the namespace's schedules and shows the page.
func (s *Server) renderSchedules(w http.ResponseWriter, r *http.Request, c *uiCall, status int, d *schedulesData) error {
	list, err := c.client.ListSchedules(r.Context())
	if err != nil {
		return err
	}
	d.CanManage = c.can(auth.RoleAdmin, "")
	d.CanTrigger = c.can(auth.RoleProducer, "")
	d.Overlaps = uiOverlaps
	if d.CanManage {
		d.Workflows, _ = c.client.ServedWorkflows(r.Context()) // suggestions only
	}
	now := s.cfg.Clock.Now() // the scheduler's clock
	for _, sc := range list {
		row := scheduleRow{S: sc}
		switch {
		case sc.Paused:
			row.NextFire = "none while paused"
		case sc.NextFireAt == nil:
			row.NextFire = "none"
		case sc.NextFireAt.After(now):
			row.NextFire = "in " + humanDuration(sc.NextFireAt.Sub(now))
		default:
			row.NextFire = "due now"
		}
		if id := sc.LastRunID; id != "" {
			row.LastRun = link{Href: c.runHref(id, sc.Spec.Queue), Text: id}
		}
		d.Schedules = append(d.Schedules, row)
	}
	s.render(w, r, c, status, "schedules", d)
	return nil
}

// uiFormRefused shows the schedules page again for err, a refusal of the
// request (4xx), with d's form as typed; other errors are the error page's.
func (s *Server) uiFormRefused(w http.ResponseWriter, r *http.Request, c *uiCall, d *schedulesData, err error, onForm bool) error {
	p, known := problemFor(err)
	if !known || p.Status >= 500 {
		return err
	}
	if onForm {
		d.FormError = p.Detail
	} else {
		d.Error = p.Detail
	}
	if rerr := s.renderSchedules(w, r, c, p.Status, d); rerr != nil {
		return err
	}
	return shownError{err}
}

// uiScheduleCreate creates a schedule from the form, as
// POST /v1/namespaces/{ns}/schedules does.
func (s *Server) uiScheduleCreate(w http.ResponseWriter, r *http.Request, c *uiCall) error {
	f := scheduleForm{Name: strings.TrimSpace(r.PostFormValue("name")), Workflow: strings.TrimSpace(r.PostFormValue("workflow")),
		Cron: strings.TrimSpace(r.PostFormValue("cron")), TimeZone: strings.TrimSpace(r.PostFormValue("time_zone")),
		Queue: strings.TrimSpace(r.PostFormValue("queue")), Input: strings.TrimSpace(r.PostFormValue("input")),
		Overlap: r.PostFormValue("overlap"), Paused: r.PostFormValue("paused") != ""}
	d := &schedulesData{Form: f}
	spec, err := f.spec()
	if err == nil {
		c.noteTarget(f.Name)
		_, err = c.client.CreateSchedule(r.Context(), f.Name, spec, trellis.CreateScheduleOptions{Paused: f.Paused})
	}
	if err != nil {
		return s.uiFormRefused(w, r, c, d, err, true)
	}
	http.Redirect(w, r, schedulesPath(c.ns)+"?created="+url.QueryEscape(f.Name), http.StatusSeeOther)
	return nil
}

// spec checks the form as the API checks its body, and is its spec.
func (f scheduleForm) spec() (trellis.ScheduleSpec, error) {
	spec := trellis.ScheduleSpec{Workflow: f.Workflow, Queue: f.Queue, Cron: f.Cron, TimeZone: f.TimeZone, Overlap: trellis.Overlap(f.Overlap)}
	if err := store.ValidateName("schedule", f.Name); err != nil {
		return spec, err
	}
	if err := checkSpecNames(spec); err != nil {
		return spec, err
	}
	if f.Cron == "" {
		return spec, fmt.Errorf("%w: cron is required: 5 fields (minute hour day-of-month month day-of-week), 6 with seconds first, or @hourly, @daily, @every 10m, …", ErrInvalidArgument)
	}
	if f.Input != "" {
		if !json.Valid([]byte(f.Input)) {
			return spec, fmt.Errorf("%w: the input is not JSON (a string is written in quotes: \"hello\")", ErrInvalidArgument)
		}
		spec.Input = trellis.Payload(f.Input)
	}
	return spec, nil
}

func (s *Server) uiSchedulePause(w http.ResponseWriter, r *http.Request, c *uiCall) error {
	return s.uiScheduleAct(w, r, c, "pause")
}

func (s *Server) uiScheduleResume(w http.ResponseWriter, r *http.Request, c *uiCall) error {
	return s.uiScheduleAct(w, r, c, "resume")
}

func (s *Server) uiScheduleTrigger(w http.ResponseWriter, r *http.Request, c *uiCall) error {
	return s.uiScheduleAct(w, r, c, "trigger")
}

// uiScheduleAct pauses, resumes or triggers the schedule of the path, then
// shows the schedules (after a trigger, with the run it started).
func (s *Server) uiScheduleAct(w http.ResponseWriter, r *http.Request, c *uiCall, act string) error {
	d := &schedulesData{Form: scheduleForm{TimeZone: "UTC"}}
	name, err := scheduleName(r)
	if err != nil {
		return s.uiFormRefused(w, r, c, d, err, false)
	}
	next := schedulesPath(c.ns)
	switch act {
	case "pause":
		_, err = c.client.PauseSchedule(r.Context(), name)
	case "resume":
		_, err = c.client.ResumeSchedule(r.Context(), name)
	case "trigger":
		var run *trellis.Run
		if run, err = c.client.TriggerSchedule(r.Context(), name); err == nil {
			c.noteDetail("run %s", run.ID)
			next += "?" + url.Values{"triggered": {run.ID}, "queue": {run.Queue}}.Encode()
		}
	}
	if err != nil {
		return s.uiFormRefused(w, r, c, d, err, false)
	}
	http.Redirect(w, r, next, http.StatusSeeOther)
	return nil
}

func schedulesPath(ns string) string { return "/ui/" + url.PathEscape(ns) + "/schedules" }
