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
	// Base is the page's path; All: the log of every namespace (and of none),
	// with Namespace its filter ("": every one).
	Base      string
	All       bool
	Namespace string
}

// uiAudit shows the namespace's audit log, newest first, to its admin: the
// entries GET /v1/namespaces/{ns}/audit lists, with its filters.
func (s *Server) uiAudit(w http.ResponseWriter, r *http.Request, c *uiCall) error {
	return s.uiAuditPage(w, r, c, auditData{Base: "/ui/" + url.PathEscape(c.ns) + "/audit", Namespace: c.ns})
}

// uiAuditAll shows the whole audit log to an admin of every namespace, entries
// of no namespace (tokens, sign-ins) included: what GET /v1/audit lists, with
// its namespace filter.
func (s *Server) uiAuditAll(w http.ResponseWriter, r *http.Request, c *uiCall) error {
	return s.uiAuditPage(w, r, c, auditData{Base: "/ui/audit", All: true,
		Namespace: strings.TrimSpace(r.URL.Query().Get("namespace"))})
}

// uiAuditPage renders a page of the audit log of d.Namespace (every one when
// d.All and it is ""), filtered by the request's query.
func (s *Server) uiAuditPage(w http.ResponseWriter, r *http.Request, c *uiCall, d auditData) error {
	q := r.URL.Query()
	d.Principal, d.Action = strings.TrimSpace(q.Get("principal")), strings.TrimSpace(q.Get("action"))
	d.Since, d.Until = q.Get("since"), q.Get("until")
	p := store.AuditListParams{Namespace: d.Namespace, Principal: d.Principal, Action: d.Action, Limit: uiAuditPageSize}
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
		if d.All && d.Namespace != "" {
			v.Set("namespace", d.Namespace)
		}
		if len(v) == 0 {
			return d.Base
		}
		return d.Base + "?" + v.Encode()
	}
	if res.NextPageToken != "" {
		d.NextHref = link(res.NextPageToken)
	}
	if token != "" {
		d.FirstHref = link("")
	}
	page := "audit"
	if d.All {
		page = "audit-all"
	}
	s.render(w, r, c, 200, page, d)
	return nil
}
