package sqlstore

import (
	"strconv"
	"strings"
	"time"
)

// Dialect is what differs between the SQL dialects in the statements written here.
type Dialect struct {
	// Param returns the marker of the nth parameter (from 1): "$n" or "?n".
	Param func(n int) string
	// Next, when set, is the marker of a parameter that takes the argument
	// after the previous one ("?"), for statements with thousands of
	// parameters: SQLite looks a numbered parameter's name up in a list, once
	// per parameter bound.
	Next string
	// Time encodes a time argument; the zero time must become NULL.
	Time func(t time.Time) any
	// InList returns a condition that holds when expr is one of the list passed as
	// the parameter param (encoded by List).
	InList func(expr, param string) string
	// List encodes a list of strings for InList.
	List func(list []string) (any, error)
	// TextList returns an expression reading the list-of-text column col as JSON
	// text (NULL stays NULL).
	TextList func(col string) string
	// IsUniqueViolation reports whether err is a failed UNIQUE or PRIMARY KEY
	// constraint.
	IsUniqueViolation func(err error) bool
	// WakeOnEvent makes pending, at $1, the run $2 when it is waiting for an
	// event named $3, and returns the run's namespace and ID.
	WakeOnEvent string
	// SchemaMigrations creates the table schema_migrations (version, name,
	// applied_at) if it does not exist.
	SchemaMigrations string
	// ReleaseHeld releases, at $1, up to $5 held children of the group ($2 parent
	// sequence, $3 position), from item $4 on, in item order, and returns the item,
	// namespace and ID of each.
	ReleaseHeld string
	// RunsOfWorkflowIDs selects RunCols of every run of namespace $1 whose
	// workflow ID is in the list $2 (encoded by List).
	RunsOfWorkflowIDs string
	// RunsGet selects RunCols of the runs of namespace $1 whose IDs are in the
	// list $2, of the statuses in the list $3 (any when it is empty); both
	// lists encoded by List.
	RunsGet string
	// WorkflowIDIs returns a condition that holds for the runs of namespace ns
	// whose workflow ID is the parameter param (both markers), written for the
	// dialect's indexes; the query names the namespace too. A run started
	// without a workflow ID has its run ID as workflow ID; both drivers index
	// workflow IDs only where they differ (Postgres' migration 0019, SQLite's
	// 0029), so they find such a run by its ID.
	WorkflowIDIs func(ns, param string) string
	// EventInsert adds an event ($2 name, $3 payload, $4 sent at) to the inbox of
	// run $1 and returns its seq. (Postgres' also marks the run as sent an event,
	// runs.has_events, in the same statement: its claims read the inbox only of
	// such runs, migration 0020.)
	EventInsert string
	// RunningApart: the index runs_status leaves running runs out (WHERE status
	// <> 'running': SQLite's migration 0016, Postgres' 0029), so a query by
	// status names that condition to read it, and counts and lists running runs
	// through runs_running instead.
	RunningApart bool
	// RunningRuns, with RunningApart, returns the FROM item from which a list
	// or a count reads the running runs of the namespace whose parameter
	// marker is ns: all of them, through runs_running (they are as many as the
	// workers' slots), named runs. SQLite's names the index (INDEXED BY);
	// Postgres' is a subquery that OFFSET 0 keeps whole, so that the planner
	// cannot walk runs_pkey newest first, filtering by status, instead: it
	// did, from statistics that counted more running runs than there were,
	// and such a walk reads every run newer than the running ones. (A part
	// read late above a bound reads plain runs: listAlt.boundedFrom.)
	RunningRuns func(ns string) string
	// ListsByStatus: no index holds every run of a namespace in sequence order
	// (Postgres' schema, which dropped runs_list: Postgres writes an entry in
	// every index of a row at each of its changes of status), so a list of runs
	// of any status reads each status apart through runs_status and merges.
	ListsByStatus bool
	// Lock is appended to a SELECT to lock the rows it reads (and those of the
	// tables named in of, when the dialect needs them named) until the
	// transaction ends: "" where the transaction already excludes other writers.
	Lock func(of ...string) string
}

// rebind rewrites the $n parameters of query in d's style. Quoted text is left
// alone.
func (d *Dialect) rebind(query string) string {
	if d.Param(1) == "$1" {
		return query
	}
	var b strings.Builder
	quoted := false
	for i := 0; i < len(query); i++ {
		c := query[i]
		if c == '\'' {
			quoted = !quoted
		}
		if c != '$' || quoted {
			b.WriteByte(c)
			continue
		}
		j := i + 1
		for j < len(query) && query[j] >= '0' && query[j] <= '9' {
			j++
		}
		n, err := strconv.Atoi(query[i+1 : j])
		if err != nil {
			b.WriteByte(c)
			continue
		}
		b.WriteString(d.Param(n))
		i = j - 1
	}
	return b.String()
}

// args numbers the parameters of a query built piece by piece.
type args struct {
	d    *Dialect
	list []any
	next string // Dialect.Next, in a statement that takes its arguments in order
}

// add appends v and returns its marker.
func (a *args) add(v any) string {
	a.list = append(a.list, v)
	if a.next != "" {
		return a.next
	}
	return a.d.Param(len(a.list))
}
