package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
)

// uiSendEvent sends the run an event from its page: a name and a JSON payload
// (empty: null), as POST /v1/namespaces/{ns}/runs/{id}/events does and under
// its rule (producer of the run's queue). Refused input shows the run's page
// again with what was typed and why, and sends nothing.
func (s *Server) uiSendEvent(w http.ResponseWriter, r *http.Request, c *uiCall) error {
	name := strings.TrimSpace(r.PostFormValue("name"))
	payload := strings.TrimSpace(r.PostFormValue("payload"))
	err := checkRef("event name", name)
	if err == nil && payload != "" && !json.Valid([]byte(payload)) {
		err = fmt.Errorf("%w: the payload is not JSON (a string is written in quotes: \"done\")", ErrInvalidArgument)
	}
	if err == nil {
		c.noteDetail("event %s", name)
		body := json.RawMessage("null")
		if payload != "" {
			body = json.RawMessage(payload)
		}
		err = c.client.SendEvent(r.Context(), c.run.ID, name, body)
	}
	if err == nil {
		http.Redirect(w, r, runPath(c.ns, c.run.ID)+"?sent="+url.QueryEscape(name), http.StatusSeeOther)
		return nil
	}
	p, known := problemFor(err)
	if !known || p.Status >= 500 {
		return err // the error page, and the log
	}
	d, rerr := s.runPage(r, c)
	if rerr != nil {
		return err
	}
	if d.Event == nil { // the run ended meanwhile: the form shows all the same, with why
		d.Event = &eventForm{}
	}
	d.Event.Name, d.Event.Payload, d.Event.Error = name, payload, p.Detail
	d.LiveSrc = runPath(c.ns, c.run.ID)
	s.render(w, r, c, p.Status, "run", d)
	return shownError{err}
}
