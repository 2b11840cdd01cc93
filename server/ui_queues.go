package server

import (
	"errors"
	"net/http"
	"net/url"
	"slices"

	"github.com/trellis-dev/trellis"
	"github.com/trellis-dev/trellis/internal/auth"
	"github.com/trellis-dev/trellis/store"
)

// uiQueueCountCap bounds each status count of a queue on the queues page, so
// that the page stays fast over a large store (a capped count shows "N+").
const uiQueueCountCap = 10_000

// uiQueueStatuses are the statuses whose depth the queues page shows.
var uiQueueStatuses = []store.Status{store.StatusPending, store.StatusRunning, store.StatusWaiting, store.StatusBlocked}

type queueRow struct {
	Name string
	// Queue is the record; nil for the namespace's default queue without one
	// (no limits, not pausable).
	Queue  *trellis.Queue
	Counts []queueCount
}

type queueCount struct {
	Status store.Status
	N      int64
	Capped bool
}

type queuesData struct {
	Queues   []queueRow
	Statuses []store.Status
	Cap      int
	CanPause bool
}

// uiQueues lists the namespace's queues: their records (paused, limits,
// defaults), the namespace's default queue even without a record, and each
// one's depth by unfinished status.
func (s *Server) uiQueues(w http.ResponseWriter, r *http.Request, c *uiCall) error {
	list, err := c.client.ListQueues(r.Context())
	if err != nil && !errors.Is(err, store.ErrNamespaceNotFound) { // no record: no queue records either
		return err
	}
	def := "default"
	if ns, err := c.client.GetNamespace(r.Context(), c.ns); err == nil && ns.DefaultQueue != "" {
		def = ns.DefaultQueue
	}
	d := queuesData{Statuses: uiQueueStatuses, Cap: uiQueueCountCap, CanPause: c.can(auth.RoleAdmin, "")}
	for _, q := range list {
		d.Queues = append(d.Queues, queueRow{Name: q.Name, Queue: q})
	}
	if !slices.ContainsFunc(list, func(q *trellis.Queue) bool { return q.Name == def }) {
		d.Queues = append([]queueRow{{Name: def}}, d.Queues...)
	}
	counter, _ := s.store.(store.RunCounter)
	if counter == nil {
		d.Statuses = nil // no depth to show
	}
	for i := range d.Queues {
		row := &d.Queues[i]
		if counter == nil {
			continue
		}
		res, err := counter.RunCounts(r.Context(), &store.RunCountsParams{Namespace: c.ns, Queue: row.Name, Cap: uiQueueCountCap})
		if err != nil {
			return err
		}
		for _, st := range uiQueueStatuses {
			row.Counts = append(row.Counts, queueCount{Status: st, N: res.Counts[st], Capped: res.Capped[st]})
		}
	}
	s.render(w, r, c, 200, "queues", d)
	return nil
}

func (s *Server) uiQueuePause(w http.ResponseWriter, r *http.Request, c *uiCall) error {
	return s.uiSetPaused(w, r, c, true)
}

func (s *Server) uiQueueResume(w http.ResponseWriter, r *http.Request, c *uiCall) error {
	return s.uiSetPaused(w, r, c, false)
}

// uiSetPaused pauses or resumes the queue of the path, then shows the queues.
func (s *Server) uiSetPaused(w http.ResponseWriter, r *http.Request, c *uiCall, paused bool) error {
	name, err := pathQueue(r)
	if err != nil {
		return err
	}
	if paused {
		_, err = c.client.PauseQueue(r.Context(), name)
	} else {
		_, err = c.client.ResumeQueue(r.Context(), name)
	}
	if err != nil {
		return err
	}
	http.Redirect(w, r, "/ui/"+url.PathEscape(c.ns)+"/queues", http.StatusSeeOther)
	return nil
}
