package server

import (
	"net/http"
	"net/url"
	"strings"

	"github.com/trellis-dev/trellis/store"
)

// uiAuditPageSize is the entries the audit page shows at a time.
const uiAuditPageSize = 100

type auditData struct {
	Principal, Action, Since, Until string
	Entries                         []*store.AuditEntry
	NextHref, FirstHref             string
}

// uiAudit shows the namespace's audit log, newest first, to its admin: the
// entries GET /v1/namespaces/{ns}/audit lists, with its filters.
func (s *Server) uiAudit(w http.ResponseWriter, r *http.Request, c *uiCall) error {
	q := r.URL.Query()
	d := auditData{Principal: strings.TrimSpace(q.Get("principal")), Action: strings.TrimSpace(q.Get("action")),
		Since: q.Get("since"), Until: q.Get("until")}
	p := store.AuditListParams{Namespace: c.ns, Principal: d.Principal, Action: d.Action, Limit: uiAuditPageSize}
	token := q.Get("page_token")
	var err error
	if p.Since, err = parseUITime("since", d.Since); err != nil {
		return err
	}
	if p.Until, err = parseUITime("until", d.Until); err != nil {
		return err
	}
	res, err := s.auditPage(r, &p, token)
	if err != nil {
		return err
	}
	d.Entries = res.Entries
	link := func(token string) string {
		v := url.Values{}
		for k, val := range map[string]string{"principal": d.Principal, "action": d.Action, "since": d.Since, "until": d.Until, "page_token": token} {
			if val != "" {
				v.Set(k, val)
			}
		}
		base := "/ui/" + url.PathEscape(c.ns) + "/audit"
		if len(v) == 0 {
			return base
		}
		return base + "?" + v.Encode()
	}
	if res.NextPageToken != "" {
		d.NextHref = link(res.NextPageToken)
	}
	if token != "" {
		d.FirstHref = link("")
	}
	s.render(w, r, c, 200, "audit", d)
	return nil
}
