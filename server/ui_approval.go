package server

import (
	"net/http"
	"net/url"
	"slices"

	"github.com/trellis-dev/trellis"
	"github.com/trellis-dev/trellis/internal/auth"
	"github.com/trellis-dev/trellis/store/blobs"
)

// An approval's page, GET /ui/{ns}/approvals/{id}: what deciding it needs,
// for an approver who may not open the run (the approver role alone reads no
// run). It shows the request (its name, subject, details, approvers, expiry),
// and of its run only the facts that place the request: the workflow, the
// run's ID and status, what it waits for, and the op that asks, with the
// names of the ops before it. Not the run's input, result, stored values or
// errors: those are the reader role's.

// approvalPath is the page of approval id in ns.
func approvalPath(ns, id string) string {
	return "/ui/" + url.PathEscape(ns) + "/approvals/" + url.PathEscape(id)
}

// askingOp is the op of the run that asks for the decision.
type askingOp struct {
	Position int
	Name     string
	Asked    string   // when the run began to wait for it
	Before   []string // the ops before it, "kind name", the last few
	Earlier  int      // ops before those
}

type approvalData struct {
	A          *trellis.ApprovalRecord
	Details    string
	Run        *trellis.Run
	RunHref    string // "" when the principal may not open the run
	Asking     *askingOp
	CanDecide  bool
	NotYouNote string
}

// approvalBefore is how many ops before the asking one its page names.
const approvalBefore = 5

func (s *Server) uiApproval(w http.ResponseWriter, r *http.Request, c *uiCall) error {
	ctx := r.Context()
	a := c.approval
	// The run's large payloads are not read: the page shows none.
	run, err := c.client.Get(blobs.WithOmitLarge(ctx), a.RunID)
	if err != nil {
		return err
	}
	d := approvalData{A: a, Details: pretty(a.Details, 16<<10), Run: run, RunHref: c.runHref(run.ID, run.Queue)}
	named := len(a.Approvers) == 0 || slices.Contains(a.Approvers, c.principal.Name)
	approver := c.can(auth.RoleApprover, run.Queue)
	d.CanDecide = a.Status == trellis.ApprovalPending && named && approver
	if a.Status == trellis.ApprovalPending && approver && !named {
		d.NotYouNote = "Only " + joinNames(a.Approvers) + " may decide this request."
	}
	ops, err := c.client.History(blobs.WithOmitLarge(ctx), run.ID)
	if err != nil {
		return err
	}
	// The asking op: the approval op of this name, the pending one if any
	// (a workflow may ask under one name more than once).
	at := -1
	for i, op := range ops {
		if op.Kind == trellis.OpApproval && op.Name == a.Name && (at < 0 || !op.Done) {
			at = i
		}
	}
	if at >= 0 {
		op := ops[at]
		ask := &askingOp{Position: op.Position, Name: op.Name, Asked: op.StartedAt.UTC().Format("2006-01-02 15:04:05Z")}
		from := max(0, at-approvalBefore)
		ask.Earlier = from
		for _, prev := range ops[from:at] {
			ask.Before = append(ask.Before, string(prev.Kind)+" "+prev.Name)
		}
		d.Asking = ask
	}
	s.render(w, r, c, 200, "approval", d)
	return nil
}

func joinNames(names []string) string {
	switch len(names) {
	case 0:
		return ""
	case 1:
		return names[0]
	}
	out := ""
	for i, n := range names {
		switch {
		case i == 0:
		case i == len(names)-1:
			out += " or "
		default:
			out += ", "
		}
		out += n
	}
	return out
}
