package server

import (
	"fmt"
	"net/http"

	"github.com/trellis-dev/trellis"
)

// StartManyRequest starts up to trellis.MaxStartMany runs in one transaction.
type StartManyRequest struct {
	Runs []StartRequest `json:"runs"`
}

// startMany serves POST /v1/namespaces/{ns}/runs:batch: every item is checked
// (and its queue authorized) before anything is written; then all the runs are
// created in one transaction, each with its own outcome.
func (s *Server) startMany(w http.ResponseWriter, r *http.Request, c *call) error {
	var req StartManyRequest
	if err := decodeBody(w, r, s.cfg.MaxBodyBytes, false, &req); err != nil {
		return err
	}
	if n := len(req.Runs); n == 0 || n > trellis.MaxStartMany {
		return fmt.Errorf("%w: runs: %d items (1 to %d)", ErrInvalidArgument, n, trellis.MaxStartMany)
	}
	reqs := make([]trellis.StartRequest, len(req.Runs))
	allowed := map[string]bool{}
	for i := range req.Runs {
		item := &req.Runs[i]
		o, err := item.options()
		if err != nil {
			return fmt.Errorf("runs[%d]: %w", i, err)
		}
		// As startRun: authorize the queue the run will be in, and start it
		// there.
		if o.Queue, err = c.client.StartQueue(r.Context(), item.Workflow, o); err != nil {
			return err
		}
		if !allowed[o.Queue] {
			if err := c.allowQueue(o.Queue); err != nil {
				return err
			}
			allowed[o.Queue] = true
		}
		input := []byte(item.Input)
		if len(input) == 0 {
			input = []byte("null")
		}
		reqs[i] = trellis.StartRequest{Workflow: item.Workflow, Input: input, Options: o}
	}
	results, err := c.client.StartMany(r.Context(), reqs)
	if err != nil {
		return err
	}
	created := 0
	for _, res := range results {
		if res.Created {
			created++
		}
	}
	c.noteDetail("created %d of %d runs", created, len(results))
	reply(w, c, 200, trellis.StartManyResponse{Results: results})
	return nil
}

// deleteRun serves DELETE /v1/namespaces/{ns}/runs/{id}: a finished run and
// everything that belongs to it, now.
func (s *Server) deleteRun(w http.ResponseWriter, r *http.Request, c *call) error {
	if err := c.client.Delete(r.Context(), c.run.ID); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
