package server

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/trellis-dev/trellis/store"
	"github.com/trellis-dev/trellis/store/blobs"
)

// searchData is the search page: shown only when the search finds no run (a
// run found is its page).
type searchData struct {
	ID, Message string
}

// uiSearch finds a run by run ID or workflow ID (the latest run of a workflow
// ID, as GET /v1/namespaces/{ns}/runs/{id} does) and sends to its page; a
// search that finds none says so. A principal limited to a queue searches it:
// its search box sends the queue, which the route's rule checks, and a run of
// another queue is refused as the run's own page refuses it.
func (s *Server) uiSearch(w http.ResponseWriter, r *http.Request, c *uiCall) error {
	id := strings.TrimSpace(r.URL.Query().Get("id"))
	if id == "" {
		s.render(w, r, c, http.StatusBadRequest, "search", searchData{Message: "Type a run ID or a workflow ID."})
		return nil
	}
	if err := checkRef("run ID", id); err != nil {
		s.render(w, r, c, http.StatusBadRequest, "search", searchData{ID: id, Message: problemDetail(err)})
		return shownError{err}
	}
	run, err := c.client.Get(blobs.WithOmitLarge(r.Context()), id)
	if errors.Is(err, store.ErrRunNotFound) {
		s.render(w, r, c, http.StatusNotFound, "search", searchData{ID: id,
			Message: fmt.Sprintf("No run with this ID: namespace %s has no run whose run ID or workflow ID is %q.", c.ns, id)})
		return nil
	}
	if err != nil {
		return err
	}
	if err := c.allowQueue(run.Queue); err != nil {
		return err
	}
	http.Redirect(w, r, runPath(c.ns, run.ID), http.StatusSeeOther)
	return nil
}

// problemDetail is the detail a page shows for err: the problem's, as the
// error page shows it.
func problemDetail(err error) string {
	p, _ := problemFor(err)
	return p.Detail
}
