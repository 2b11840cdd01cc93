package server

import (
	"net/http"

	"github.com/trellis-dev/trellis/store"
)

// Namespaces and queues as objects (docs/queues.md): admins create and change
// them; readers list and read them.

type (
	// NamespaceRequest creates a namespace; absent fields take the defaults
	// (retention "720h", default queue "default", no payload limit).
	NamespaceRequest struct {
		Name         string         `json:"name"`
		Retention    store.Duration `json:"retention,omitempty"`
		DefaultQueue string         `json:"default_queue,omitempty"`
		PayloadLimit int            `json:"payload_limit,omitempty"`
	}
	// NamespaceUpdateRequest changes the fields it holds.
	NamespaceUpdateRequest struct {
		Retention    *store.Duration `json:"retention,omitempty"`
		DefaultQueue *string         `json:"default_queue,omitempty"`
		PayloadLimit *int            `json:"payload_limit,omitempty"`
	}
	// QueueRequest creates a queue; absent limits are none. Every limit given
	// must be positive.
	QueueRequest struct {
		Name   string `json:"name"`
		Paused bool   `json:"paused,omitempty"`
		store.QueueSettings
	}
	// QueueUpdateRequest changes the settings it holds.
	QueueUpdateRequest struct {
		store.QueueSettings
	}
	// NamespaceList lists namespaces by name.
	NamespaceList struct {
		Namespaces []*store.Namespace `json:"namespaces"`
	}
	// QueueList lists a namespace's queues by name.
	QueueList struct {
		Queues []*store.Queue `json:"queues"`
	}
)

func (s *Server) createNamespace(w http.ResponseWriter, r *http.Request, c *call) error {
	var req NamespaceRequest
	if err := decodeBody(w, r, s.cfg.MaxBodyBytes, false, &req); err != nil {
		return err
	}
	if err := checkNamespaceName(req.Name); err != nil {
		return err
	}
	c.note.ns, c.note.id = req.Name, req.Name
	if c.keyed != nil {
		c.keyed.ns = req.Name // the path names no namespace: the key is kept in the new one
	}
	ns, err := s.store.NamespaceCreate(r.Context(), &store.NamespaceCreateParams{Name: req.Name,
		Retention: req.Retention, DefaultQueue: req.DefaultQueue, PayloadLimit: req.PayloadLimit,
		Idempotency: c.idempotency()})
	if err != nil {
		return err
	}
	reply(w, c, 201, ns)
	return nil
}

// checkNamespaceName refuses a name a request path could not address.
func checkNamespaceName(name string) error {
	return store.ValidateNamespace(name)
}

// listNamespaces lists the namespaces with a record (the route needs the reader
// role on every namespace).
func (s *Server) listNamespaces(w http.ResponseWriter, r *http.Request, c *call) error {
	list, err := s.store.NamespaceList(r.Context())
	if err != nil {
		return err
	}
	writeJSON(w, 200, NamespaceList{Namespaces: list})
	return nil
}

func (s *Server) getNamespace(w http.ResponseWriter, r *http.Request, c *call) error {
	ns, err := c.client.GetNamespace(r.Context(), c.ns)
	if err != nil {
		return err
	}
	writeJSON(w, 200, ns)
	return nil
}

func (s *Server) updateNamespace(w http.ResponseWriter, r *http.Request, c *call) error {
	var req NamespaceUpdateRequest
	if err := decodeBody(w, r, s.cfg.MaxBodyBytes, false, &req); err != nil {
		return err
	}
	ns, err := c.client.UpdateNamespace(r.Context(), store.NamespaceUpdateParams{Name: c.ns,
		Retention: req.Retention, DefaultQueue: req.DefaultQueue, PayloadLimit: req.PayloadLimit,
		Idempotency: c.idempotency()})
	if err != nil {
		return err
	}
	reply(w, c, 200, ns)
	return nil
}

func (s *Server) createQueue(w http.ResponseWriter, r *http.Request, c *call) error {
	var req QueueRequest
	if err := decodeBody(w, r, s.cfg.MaxBodyBytes, false, &req); err != nil {
		return err
	}
	if err := store.ValidateName("queue", req.Name); err != nil {
		return err
	}
	c.noteTarget(req.Name)
	p := &store.QueueCreateParams{Namespace: c.ns, Name: req.Name, Paused: req.Paused, QueueSettings: req.QueueSettings,
		Idempotency: c.idempotency()}
	if err := p.Validate(); err != nil {
		return err
	}
	q, err := s.store.QueueCreate(r.Context(), p)
	if err != nil {
		return err
	}
	s.queues.Forget(c.ns, req.Name) // remote workers' runs take its policy at once
	reply(w, c, 201, q)
	return nil
}

func (s *Server) listQueues(w http.ResponseWriter, r *http.Request, c *call) error {
	list, err := c.client.ListQueues(r.Context())
	if err != nil {
		return err
	}
	writeJSON(w, 200, QueueList{Queues: list})
	return nil
}

// pathQueue is the {queue} of a request's path, checked.
func pathQueue(r *http.Request) (string, error) {
	q := r.PathValue("queue")
	return q, checkRef("queue", q)
}

func (s *Server) getQueue(w http.ResponseWriter, r *http.Request, c *call) error {
	name, err := pathQueue(r)
	if err != nil {
		return err
	}
	q, err := c.client.GetQueue(r.Context(), name)
	if err != nil {
		return err
	}
	writeJSON(w, 200, q)
	return nil
}

func (s *Server) updateQueue(w http.ResponseWriter, r *http.Request, c *call) error {
	name, err := pathQueue(r)
	if err != nil {
		return err
	}
	var req QueueUpdateRequest
	if err := decodeBody(w, r, s.cfg.MaxBodyBytes, false, &req); err != nil {
		return err
	}
	q, err := c.client.UpdateQueue(r.Context(), name, req.QueueSettings)
	if err != nil {
		return err
	}
	s.queues.Forget(c.ns, name)
	reply(w, c, 200, q)
	return nil
}

func (s *Server) pauseQueue(w http.ResponseWriter, r *http.Request, c *call) error {
	return s.setQueuePaused(w, r, c, true)
}

func (s *Server) resumeQueue(w http.ResponseWriter, r *http.Request, c *call) error {
	return s.setQueuePaused(w, r, c, false)
}

func (s *Server) setQueuePaused(w http.ResponseWriter, r *http.Request, c *call, paused bool) error {
	name, err := pathQueue(r)
	if err != nil {
		return err
	}
	var empty struct{}
	if err := decodeBody(w, r, s.cfg.MaxBodyBytes, true, &empty); err != nil {
		return err
	}
	var q *store.Queue
	if paused {
		q, err = c.client.PauseQueue(r.Context(), name)
	} else {
		q, err = c.client.ResumeQueue(r.Context(), name)
	}
	if err != nil {
		return err
	}
	reply(w, c, 200, q)
	return nil
}
