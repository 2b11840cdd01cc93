package server

import (
	"net/http"

	"github.com/trellis-dev/trellis/store"
)

// AuditList is a page of the audit log, newest first.
type AuditList struct {
	Entries []*store.AuditEntry `json:"entries"`
	// NextPageToken continues the listing (page_token); empty on the last page.
	NextPageToken string `json:"next_page_token,omitempty"`
}

var (
	// namespaceAuditParams filter GET /v1/namespaces/{ns}/audit.
	namespaceAuditParams = append([]param{
		{"principal", "string", "the principal (token name) that made the requests"},
		{"action", "string", `an action ("run.cancel"), or every action on a kind of object ("token.*")`},
		{"since", "string", "RFC 3339 time, inclusive"},
		{"until", "string", "RFC 3339 time, exclusive"},
	}, pageParams...)
	// auditParams filter GET /v1/audit.
	auditParams = append([]param{{"namespace", "string", "the namespace of the target (entries of no namespace, such as the tokens', are left out)"}},
		namespaceAuditParams...)
)

// listAudit serves GET /v1/audit: the entries of every namespace and of none,
// to an admin of every namespace.
func (s *Server) listAudit(w http.ResponseWriter, r *http.Request, c *call) error {
	q := parseQuery(r, auditParams)
	ns := q.str("namespace")
	return s.writeAudit(w, r, q, ns)
}

// listNamespaceAudit serves GET /v1/namespaces/{ns}/audit: the entries of one
// namespace, to its admin.
func (s *Server) listNamespaceAudit(w http.ResponseWriter, r *http.Request, c *call) error {
	return s.writeAudit(w, r, parseQuery(r, namespaceAuditParams), c.ns)
}

// writeAudit answers the page of the audit log of namespace ns ("": every
// entry) that the query's filters select.
func (s *Server) writeAudit(w http.ResponseWriter, r *http.Request, q *query, ns string) error {
	p := store.AuditListParams{Namespace: ns, Principal: q.str("principal"), Action: q.str("action"),
		Since: q.time("since"), Until: q.time("until"), Limit: q.limit("limit", store.MaxListLimit)}
	token := q.str("page_token")
	if q.err != nil {
		return q.err
	}
	page, err := s.auditPage(r, &p, token)
	if err != nil {
		return err
	}
	writeJSON(w, 200, page)
	return nil
}

// auditPage reads the page of the audit log p selects from page token
// token, whose next token it seals (pagetoken.go: bound to the list's
// namespace and filter).
func (s *Server) auditPage(r *http.Request, p *store.AuditListParams, token string) (*AuditList, error) {
	filter := auditFilter{Principal: p.Principal, Action: p.Action, Since: unixNano(p.Since), Until: unixNano(p.Until)}
	var err error
	if p.Cursor, err = s.openPage("audit", p.Namespace, filter, token); err != nil {
		return nil, err
	}
	res, err := s.store.AuditList(r.Context(), p)
	if err != nil {
		return nil, err
	}
	next, err := s.sealPage("audit", p.Namespace, filter, res.NextCursor)
	if err != nil {
		return nil, err
	}
	return &AuditList{Entries: res.Entries, NextPageToken: next}, nil
}

// auditFilter is what a page token of the audit log is bound to, besides
// its namespace.
type auditFilter struct {
	Principal string `json:"p,omitempty"`
	Action    string `json:"a,omitempty"`
	Since     int64  `json:"s,omitempty"`
	Until     int64  `json:"u,omitempty"`
}
