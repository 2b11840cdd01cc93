package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/trellis-dev/trellis"
	"github.com/trellis-dev/trellis/internal/auth"
	"github.com/trellis-dev/trellis/store"
)

// uiRunsPageSize is the number of runs per page of the runs page.
const uiRunsPageSize = 50

// uiFilteredCountCap caps the counts per status of a filtered runs page.
const uiFilteredCountCap = 1000

// uiOpsPageSize is the number of ops per page of a run's timeline.
const uiOpsPageSize = 200

var uiFuncs = template.FuncMap{
	"ago": func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return humanDuration(time.Since(t)) + " ago"
	},
	"ts": func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return t.UTC().Format("2006-01-02 15:04:05Z")
	},
	"tsp": func(t *time.Time) string {
		if t == nil {
			return ""
		}
		return t.UTC().Format("2006-01-02 15:04:05Z")
	},
	"runPath": runPath,
	"join":    strings.Join,
	"short": func(id string) string {
		if len(id) > 14 {
			return id[:14] + "…"
		}
		return id
	},
	"runDuration": func(r *trellis.Run) string {
		if r.StartedAt == nil {
			return ""
		}
		end := time.Now()
		if r.FinishedAt != nil {
			end = *r.FinishedAt
		}
		return humanDuration(end.Sub(*r.StartedAt))
	},
	"terminal": func(st trellis.Status) bool { return st.Terminal() },
}

// humanDuration is a short duration: 850ms, 4.2s, 3m10s, 5h2m, 3d4h.
func humanDuration(d time.Duration) string {
	switch {
	case d < 0:
		return "0s"
	case d < time.Second:
		return strconv.FormatInt(d.Milliseconds(), 10) + "ms"
	case d < time.Minute:
		return strconv.FormatFloat(d.Seconds(), 'f', 1, 64) + "s"
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd%02dh", int(d.Hours())/24, int(d.Hours())%24)
}

// pretty renders a payload for a page: indented JSON, or a note for binary.
func pretty(p []byte, max int) string {
	if len(p) == 0 {
		return ""
	}
	var buf bytes.Buffer
	if json.Valid(p) {
		if err := json.Indent(&buf, p, "", "  "); err == nil {
			p = buf.Bytes()
		}
	} else if !utf8.Valid(p) {
		return fmt.Sprintf("(%d bytes of binary data)", len(p))
	}
	if len(p) > max {
		return string(p[:max]) + fmt.Sprintf("\n… (%d bytes more)", len(p)-max)
	}
	return string(p)
}

// statusCount is one chip of the runs page's counts.
type statusCount struct {
	Status trellis.Status
	N      string
	Href   string
	Active bool
}

type runsData struct {
	Status, Workflow, Queue, After, Before string
	Statuses                               []trellis.Status
	Counts                                 []statusCount
	Runs                                   []*trellis.Run
	NextHref, FirstHref                    string
	Live                                   bool
	Workflows                              []string
}

// parseUITime reads a time filter: RFC 3339, or a datetime-local field (UTC).
func parseUITime(what, v string) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	for _, layout := range []string{time.RFC3339, "2006-01-02T15:04", "2006-01-02T15:04:05", "2006-01-02"} {
		if t, err := time.Parse(layout, v); err == nil {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("%w: %s: %q is not a time (2006-01-02T15:04, UTC, or RFC 3339)", ErrInvalidArgument, what, v)
}

func (s *Server) uiRuns(w http.ResponseWriter, r *http.Request, c *uiCall) error {
	q := r.URL.Query()
	d := runsData{Status: q.Get("status"), Workflow: strings.TrimSpace(q.Get("workflow")), Queue: strings.TrimSpace(q.Get("queue")),
		After: q.Get("after"), Before: q.Get("before"), Statuses: make([]trellis.Status, len(store.AllStatuses))}
	for i, st := range store.AllStatuses {
		d.Statuses[i] = trellis.Status(st)
	}
	o := trellis.ListOptions{Workflow: d.Workflow, Queue: d.Queue, Limit: uiRunsPageSize, Cursor: q.Get("page_token")}
	var err error
	if o.CreatedAfter, err = parseUITime("after", d.After); err != nil {
		return err
	}
	if o.CreatedBefore, err = parseUITime("before", d.Before); err != nil {
		return err
	}
	if d.Status != "" {
		if !trellis.Status(d.Status).Valid() {
			return fmt.Errorf("%w: status: unknown run state %q", ErrInvalidArgument, d.Status)
		}
		o.Statuses = []trellis.Status{trellis.Status(d.Status)}
	}
	page, err := s.listRunPage(r.Context(), &c.call, o) // page tokens sealed as the API's
	if err != nil {
		return err
	}
	d.Runs = page.Runs
	d.Live = o.Cursor == ""
	filter := url.Values{}
	for k, v := range map[string]string{"workflow": d.Workflow, "queue": d.Queue, "after": d.After, "before": d.Before} {
		if v != "" {
			filter.Set(k, v)
		}
	}
	base := "/ui/" + c.ns + "/runs"
	link := func(status, token string) string {
		v := url.Values{}
		for k, vs := range filter {
			v[k] = vs
		}
		if status != "" {
			v.Set("status", status)
		}
		if token != "" {
			v.Set("page_token", token)
		}
		if len(v) == 0 {
			return base
		}
		return base + "?" + v.Encode()
	}
	if page.NextCursor != "" {
		d.NextHref = link(d.Status, page.NextCursor)
	}
	if o.Cursor != "" {
		d.FirstHref = link(d.Status, "")
	}
	if counter, ok := s.store.(store.RunCounter); ok {
		// Unfiltered counts read the runs_status index alone; a filter on other
		// columns reads each run it counts, so it counts to a lower cap.
		limit := int64(store.DefaultCountCap)
		if o.Workflow != "" || o.Queue != "" || !o.CreatedAfter.IsZero() || !o.CreatedBefore.IsZero() {
			limit = uiFilteredCountCap
		}
		counts, err := counter.RunCounts(r.Context(), &store.RunCountsParams{Namespace: c.ns, Workflow: o.Workflow,
			Queue: o.Queue, CreatedAfter: o.CreatedAfter, CreatedBefore: o.CreatedBefore, Cap: limit})
		if err != nil {
			return err
		}
		for _, st := range store.AllStatuses {
			n := strconv.FormatInt(counts.Counts[st], 10)
			if counts.Capped[st] {
				n = strconv.FormatInt(limit, 10) + "+"
			}
			d.Counts = append(d.Counts, statusCount{Status: trellis.Status(st), N: n, Href: link(string(st), ""), Active: d.Status == string(st)})
		}
	}
	s.render(w, r, c, 200, "runs", d)
	return nil
}

// bar is one segment of a timeline row, in thousandths of the run's span.
type bar struct {
	X, W  float64
	Class string
	Title string
}

// opRow is one op of a run's timeline.
type opRow struct {
	Position  int
	Kind      string
	Name      string
	Done      bool
	Attempts  int
	Start     string
	Duration  string
	Bars      []bar
	Error     string
	Failures  []string // the failed attempts: "attempt 2 (1.2s): message"
	Detail    string
	Links     []link
	InFlight  bool
	FullError string
}

// link is a link of a timeline row; without Href (a page the principal may
// not open) its text shows alone.
type link struct{ Href, Text string }

type kvRow struct{ Key, Value string }

type runData struct {
	Run                 *trellis.Run
	Input, Output       string
	Error               string
	Ops                 []opRow
	OpsTotal            int
	Page, Pages         int
	PrevHref, NextHref  string
	FirstHref, LastHref string
	Now                 string // what the run does now
	Values              []kvRow
	Parent              string
	CanCancel           bool
	CanResume           bool
	CanReset            bool
	Span                string
	Final               bool
	// Claims and attempts: the run's Attempts counts claims (a worker took
	// it); these count its steps' attempts, over the whole history.
	StepAttempts, StepFailures, Steps int
	Event                             *eventForm // nil: the principal may not send one, or the run ended
	LiveSrc                           string     // the live region's URL, when the page answers a form
	Sent                              string     // the event the form just sent
}

// eventForm is the run page's form that sends the run an event.
type eventForm struct {
	Name, Payload string
	Waiting       string // the event the run waits for now, if any
	Error         string
}

func (s *Server) uiRun(w http.ResponseWriter, r *http.Request, c *uiCall) error {
	d, err := s.runPage(r, c)
	if err != nil {
		return err
	}
	d.Sent = r.URL.Query().Get("sent") // the run may have ended since: shown without the form
	s.render(w, r, c, 200, "run", d)
	return nil
}

// runPage reads what the run page of the call's run shows.
func (s *Server) runPage(r *http.Request, c *uiCall) (*runData, error) {
	ctx := r.Context()
	run := c.run
	ops, err := c.client.History(ctx, run.ID)
	if err != nil {
		return nil, err
	}
	d := &runData{Run: run, Input: pretty(run.Input, 16<<10), Output: pretty(run.Output, 16<<10), OpsTotal: len(ops),
		Final: run.Status.Terminal()}
	if run.Error != nil {
		d.Error = run.Error.Message
		if run.Error.Type != "" {
			d.Error = run.Error.Type + ": " + d.Error
		}
	}
	if run.ParentID != "" {
		d.Parent = s.parentHref(r, c, run.ParentID)
	}
	producer := c.can(auth.RoleProducer, run.Queue)
	d.CanCancel = producer && !run.Status.Terminal()
	d.CanResume = producer && run.Status == trellis.StatusBlocked
	d.CanReset = producer && run.Status.Terminal()
	if producer && !run.Status.Terminal() {
		d.Event = &eventForm{}
	}
	for _, op := range ops {
		if op.Kind == trellis.OpStep {
			d.Steps++
			d.StepAttempts += op.Attempts
			d.StepFailures += len(op.AttemptLog)
		}
		if d.Event != nil && op.Kind == trellis.OpEvent && !op.Done {
			d.Event.Waiting = op.Name
		}
	}

	// The run's store: the last write of each key in history.
	values := map[string]string{}
	var keys []string
	for _, op := range ops {
		switch op.Kind {
		case trellis.OpSet:
			if _, ok := values[op.Name]; !ok {
				keys = append(keys, op.Name)
			}
			values[op.Name] = pretty(op.Result, 2048)
		case trellis.OpDelete:
			delete(values, op.Name)
		}
	}
	for _, k := range keys {
		if v, ok := values[k]; ok {
			d.Values = append(d.Values, kvRow{Key: k, Value: v})
			delete(values, k)
		}
	}

	// The timeline, to the scale of the run's whole span.
	t0 := run.CreatedAt
	t1 := s.cfg.Clock.Now()
	if run.FinishedAt != nil {
		t1 = *run.FinishedAt
	}
	for _, op := range ops {
		if op.FinishedAt != nil && op.FinishedAt.After(t1) {
			t1 = *op.FinishedAt
		}
	}
	span := t1.Sub(t0)
	if span <= 0 {
		span = time.Millisecond
	}
	d.Span = humanDuration(span)
	scale := func(a, b time.Time) (float64, float64) {
		x := float64(a.Sub(t0)) / float64(span) * 1000
		wd := float64(b.Sub(a)) / float64(span) * 1000
		if x < 0 {
			x = 0
		}
		if wd < 3 {
			wd = 3
		}
		if x+wd > 1000 {
			x = max(0, 1000-wd)
		}
		return x, wd
	}
	d.Pages = max(1, (len(ops)+uiOpsPageSize-1)/uiOpsPageSize)
	d.Page = 1
	if p, err := strconv.Atoi(r.URL.Query().Get("ops_page")); err == nil && p >= 1 && p <= d.Pages {
		d.Page = p
	}
	pageLink := func(p int) string { return runPath(c.ns, run.ID) + "?ops_page=" + strconv.Itoa(p) }
	if d.Page > 1 {
		d.PrevHref, d.FirstHref = pageLink(d.Page-1), pageLink(1)
	}
	if d.Page < d.Pages {
		d.NextHref, d.LastHref = pageLink(d.Page+1), pageLink(d.Pages)
	}
	lo := (d.Page - 1) * uiOpsPageSize
	hi := min(len(ops), lo+uiOpsPageSize)
	// A wait that ended is recorded when it ended: it began when the op
	// before it ended (or the run started).
	prevEnd := make([]time.Time, len(ops))
	last := run.CreatedAt
	if run.StartedAt != nil {
		last = *run.StartedAt
	}
	for i, op := range ops {
		prevEnd[i] = last
		if op.FinishedAt != nil && op.FinishedAt.After(last) {
			last = *op.FinishedAt
		}
	}
	for i, op := range ops[lo:hi] {
		row := opRow{Position: op.Position, Kind: string(op.Kind), Name: op.Name, Done: op.Done, Attempts: op.Attempts,
			Start: op.StartedAt.UTC().Format("15:04:05.000")}
		end := t1
		if op.FinishedAt != nil {
			end = *op.FinishedAt
		}
		start := op.StartedAt
		if isWait(op.Kind) && op.FinishedAt != nil && prevEnd[lo+i].Before(start) {
			start = prevEnd[lo+i]
		}
		for _, a := range op.AttemptLog {
			x, wd := scale(a.StartedAt, a.FinishedAt)
			verb, class := "failed", "fail"
			switch a.Outcome {
			case trellis.AttemptLost:
				verb, class = "was lost (its worker's lease expired)", "lost"
			case trellis.AttemptTimedOut:
				verb, class = "timed out (the server ended its lease)", "lost"
			}
			msg := fmt.Sprintf("attempt %d %s after %s: %s", a.Attempt, verb, humanDuration(a.FinishedAt.Sub(a.StartedAt)), a.Error.Message)
			row.Bars = append(row.Bars, bar{X: x, W: wd, Class: class, Title: msg})
			row.Failures = append(row.Failures, msg)
			if a.FinishedAt.After(start) {
				start = a.FinishedAt
			}
		}
		// The attempt that completed a step after failed ones: its own bar
		// and time, not the backoff before it.
		title := op.Name
		if op.AttemptStartedAt != nil && op.AttemptStartedAt.After(start) {
			start = *op.AttemptStartedAt
			title = fmt.Sprintf("%s: attempt %d succeeded", op.Name, op.Attempts)
		}
		class := "ok"
		switch {
		case op.Error != nil:
			class = "fail"
			row.Error = op.Error.Message
		case !op.Done:
			class, row.InFlight = "live", true
		case isWait(op.Kind):
			class = "wait"
		}
		// A step that failed for good logged its last attempt too: that
		// attempt's bar is drawn already and its time is the row's (from its
		// end on, the row showed an empty bar and 0ms).
		var lastFailed *trellis.Attempt
		if n := len(op.AttemptLog); op.Error != nil && n > 0 && op.FinishedAt != nil && !op.AttemptLog[n-1].FinishedAt.Before(*op.FinishedAt) {
			lastFailed = &op.AttemptLog[n-1]
		}
		if lastFailed == nil && (op.Done || op.Error != nil || op.FinishedAt != nil) {
			x, wd := scale(start, end)
			row.Bars = append(row.Bars, bar{X: x, W: wd, Class: class, Title: title})
		} else if lastFailed == nil && !run.Status.Terminal() {
			x, wd := scale(start, t1)
			row.Bars = append(row.Bars, bar{X: x, W: wd, Class: class, Title: op.Name + " (under way)"})
		}
		if lastFailed != nil {
			row.Duration = humanDuration(lastFailed.FinishedAt.Sub(lastFailed.StartedAt))
		} else if op.FinishedAt != nil {
			row.Duration = humanDuration(op.FinishedAt.Sub(start))
		} else if !run.Status.Terminal() {
			row.Duration = humanDuration(time.Since(op.StartedAt)) + " so far"
		}
		switch op.Kind {
		case trellis.OpApproval:
			var dec trellis.Decision
			if op.Done && op.Error == nil && json.Unmarshal(op.Result, &dec) == nil {
				verb := "rejected"
				if dec.Approved {
					verb = "approved"
				}
				row.Detail = verb + " by " + dec.Principal
				if dec.Comment != "" {
					row.Detail += ": “" + dec.Comment + "”"
				}
			} else if !op.Done {
				row.Detail = "waiting for a decision"
				if mayOpen(c.principal, c.ns, uiNS+"/approvals", "") {
					row.Links = append(row.Links, s.approvalLink(r, c, op.Name))
				}
			}
		case trellis.OpChild:
			children, err := s.store.RunChildren(ctx, &store.RunChildrenParams{Namespace: c.ns, Parent: run.ID, Position: op.Position})
			if err == nil {
				for i, ch := range children {
					if i == 20 {
						row.Detail = fmt.Sprintf("and %d more children", len(children)-20)
						break
					}
					row.Links = append(row.Links, link{Href: c.runHref(ch.ID, ch.Queue), Text: ch.Workflow + " " + string(ch.Status)})
				}
			}
		case trellis.OpTimer:
			var due time.Time
			if json.Unmarshal(op.Result, &due) == nil {
				row.Detail = "sleep until " + due.UTC().Format("2006-01-02 15:04:05.000Z")
			}
		case trellis.OpEvent:
			if !op.Done {
				row.Detail = "waiting for event " + op.Name
			}
		case trellis.OpSet, trellis.OpNow, trellis.OpUUID, trellis.OpRandom:
			row.Detail = oneLineUI(pretty(op.Result, 200))
		}
		d.Ops = append(d.Ops, row)
	}
	switch {
	case run.Status == trellis.StatusRunning:
		d.Now = "running on " + run.LeaseOwner
		if st := run.CurrentStep; st != nil { // as the lease heartbeat last reported it
			d.Now = fmt.Sprintf("step %s, attempt %d, since %s (on %s)", st.Name, st.Attempt, humanDuration(time.Since(st.Since)), run.LeaseOwner)
			break
		}
		for i := len(ops) - 1; i >= 0; i-- {
			if op := ops[i]; op.Kind == trellis.OpStep && !op.Done {
				d.Now = fmt.Sprintf("step %s, attempt %d, since %s (on %s)", op.Name, op.Attempts+1, humanDuration(time.Since(op.StartedAt)), run.LeaseOwner)
				break
			}
		}
	case run.WaitReason != "":
		d.Now = run.WaitReason
	}
	return d, nil
}

// approvalLink links the pending approval request name of the call's run to
// its page, or to the approvals when it is not found.
func (s *Server) approvalLink(r *http.Request, c *uiCall, name string) link {
	list, err := c.client.Approvals(r.Context(), trellis.ApprovalFilter{Run: c.run.ID,
		Statuses: []trellis.ApprovalStatus{trellis.ApprovalPending}, Limit: 100})
	if err == nil {
		for _, a := range list.Approvals {
			if a.Name == name {
				return link{Href: approvalPath(c.ns, a.ID), Text: "decide"}
			}
		}
	}
	return link{Href: "/ui/" + url.PathEscape(c.ns) + "/approvals", Text: "approvals"}
}

// parentHref is the link to the run's parent, or "" when the principal may not
// open it (or it is gone): the parent's queue is read only when the
// principal's grant does not cover the whole namespace.
func (s *Server) parentHref(r *http.Request, c *uiCall, id string) string {
	if href := c.runHref(id, ""); href != "" {
		return href
	}
	parent, err := c.client.Get(r.Context(), id)
	if err != nil {
		return ""
	}
	return c.runHref(id, parent.Queue)
}

// isWait reports whether ops of kind k wait (for a time, an event, a decision,
// children).
func isWait(k trellis.OpKind) bool {
	switch k {
	case trellis.OpTimer, trellis.OpEvent, trellis.OpApproval, trellis.OpChild, trellis.OpSelect:
		return true
	}
	return false
}

func oneLineUI(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 120 {
		s = s[:120] + "…"
	}
	return s
}

type approvalRow struct {
	A          *trellis.ApprovalRecord
	Details    string
	CanDecide  bool
	Queue      string
	RunHref    string // "" when the principal may not open the run: its ID shows as text
	NotYouNote string
}

type approvalsData struct {
	Pending []approvalRow
	Decided []approvalRow
}

func (s *Server) uiApprovals(w http.ResponseWriter, r *http.Request, c *uiCall) error {
	ctx := r.Context()
	var d approvalsData
	pending, err := c.client.Approvals(ctx, trellis.ApprovalFilter{Statuses: []trellis.ApprovalStatus{trellis.ApprovalPending}, Limit: 100})
	if err != nil {
		return err
	}
	decided, err := c.client.Approvals(ctx, trellis.ApprovalFilter{Statuses: []trellis.ApprovalStatus{
		trellis.ApprovalApproved, trellis.ApprovalRejected, trellis.ApprovalExpired}, Limit: 20})
	if err != nil {
		return err
	}
	// The queues of the requests' runs: who may decide, and who may open the run.
	var ids []string
	for _, a := range append(pending.Approvals, decided.Approvals...) {
		ids = append(ids, a.RunID)
	}
	queues := map[string]string{}
	if len(ids) > 0 {
		runs, err := s.store.RunsGet(ctx, &store.RunsGetParams{Namespace: c.ns, IDs: ids})
		if err != nil {
			return err
		}
		for _, run := range runs {
			if run != nil {
				queues[run.ID] = run.Queue
			}
		}
	}
	for _, a := range pending.Approvals {
		q := queues[a.RunID]
		row := approvalRow{A: a, Details: pretty(a.Details, 4096), Queue: q, RunHref: c.runHref(a.RunID, q)}
		named := len(a.Approvers) == 0
		for _, n := range a.Approvers {
			named = named || n == c.principal.Name
		}
		row.CanDecide = named && c.can(auth.RoleApprover, q)
		if !named && c.can(auth.RoleApprover, q) {
			row.NotYouNote = "only " + strings.Join(a.Approvers, ", ") + " may decide"
		}
		d.Pending = append(d.Pending, row)
	}
	for _, a := range decided.Approvals {
		q := queues[a.RunID]
		d.Decided = append(d.Decided, approvalRow{A: a, Queue: q, RunHref: c.runHref(a.RunID, q)})
	}
	s.render(w, r, c, 200, "approvals", d)
	return nil
}

type workersData struct {
	Workers   []*trellis.WorkerRecord
	Workflows []string
	Live      int
}

func (s *Server) uiWorkers(w http.ResponseWriter, r *http.Request, c *uiCall) error {
	ws, err := c.client.Workers(r.Context())
	if err != nil {
		return err
	}
	names, err := c.client.ServedWorkflows(r.Context())
	if err != nil {
		return err
	}
	d := workersData{Workers: ws, Workflows: names}
	for _, wk := range ws {
		if wk.Live {
			d.Live++
		}
	}
	s.render(w, r, c, 200, "workers", d)
	return nil
}
