package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/trellis-dev/trellis/internal/httpc"
	"github.com/trellis-dev/trellis/server"
	"github.com/trellis-dev/trellis/store"
)

const auditUsage = `Usage: trellis audit list [flags] (--store URL | --server URL --token T)

Subcommands:
  list    list the audit log, newest first, one page at a time

The audit log records every change a principal asked a server for, through its
API or its web UI: starts, cancellations, resets, events, approvals, namespaces,
queues, schedules, tokens, deletions, sign-ins; who (the token's name), what,
on which object, how it ended ("ok" or the error's code), when, the request's
ID and its source address (docs/security.md, "Audit log"). Through a server it
needs an admin token of every namespace, or, with --namespace, an admin token of
that namespace.
`

func runAudit(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	printUsage := func(w io.Writer) { fmt.Fprint(w, auditUsage) }
	if len(args) == 0 {
		return &usageError{msg: "audit: no subcommand given", cmd: "audit"}
	}
	switch sub, rest := args[0], args[1:]; sub {
	case "list":
		return auditList(ctx, rest, stdout, stderr)
	case "help", "-h", "-help", "--help":
		return &helpError{usage: printUsage}
	default:
		return &usageError{msg: fmt.Sprintf("audit: unknown subcommand %q", sub), cmd: "audit"}
	}
}

// auditArgs are the flags of trellis audit list.
type auditArgs struct {
	target
	p      store.AuditListParams
	asJSON bool
}

func parseAuditArgs(args []string, stderr io.Writer) (*auditArgs, error) {
	fs := newFlagSet("audit list", "audit list (--store URL | --server URL --token T) [flags]",
		"List the audit log, newest first, one page at a time.", stderr)
	var a auditArgs
	var since, until string
	connFlags(fs, &a.target)
	fs.StringVar(&a.p.Namespace, "namespace", "", "only the entries of this `namespace` (else every entry)")
	fs.StringVar(&a.p.Principal, "principal", "", "only the changes of this `principal` (a token's name)")
	fs.StringVar(&a.p.Action, "action", "", "only this `action` (run.cancel), or every action on a kind of object (token.*)")
	fs.StringVar(&since, "since", "", "only entries from this `time` on: RFC 3339, or a duration ago (24h)")
	fs.StringVar(&until, "until", "", "only entries before this `time`: RFC 3339, or a duration ago")
	fs.IntVar(&a.p.Limit, "limit", 0, "page size: default 100, at most 1000")
	fs.StringVar(&a.p.Cursor, "cursor", "", "continue from the `cursor` a previous page printed")
	fs.BoolVar(&a.asJSON, "json", false, "print the page as JSON")
	pos, err := parseArgs(fs, args)
	switch {
	case err != nil:
		return nil, err
	case len(pos) > 0:
		return nil, usagef(fs, "audit list: unexpected argument %q", pos[0])
	case a.p.Limit < 0 || a.p.Limit > store.MaxListLimit:
		return nil, usagef(fs, "audit list: --limit %d: must be between 1 and %d", a.p.Limit, store.MaxListLimit)
	}
	now := time.Now()
	if a.p.Since, err = auditTime(since, now); err != nil {
		return nil, usagef(fs, "audit list: --since: %v", err)
	}
	if a.p.Until, err = auditTime(until, now); err != nil {
		return nil, usagef(fs, "audit list: --until: %v", err)
	}
	if err := a.p.Validate(); err != nil {
		return nil, usagef(fs, "audit list: %s", paramsText(err))
	}
	return &a, a.target.resolve(fs)
}

// auditTime reads a time flag: RFC 3339, or a duration before now.
func auditTime(s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t.UTC(), nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return time.Time{}, fmt.Errorf("%q is neither an RFC 3339 time nor a duration such as 24h", s)
	}
	return now.Add(-d).UTC(), nil
}

func auditList(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	a, err := parseAuditArgs(args, stderr)
	if err != nil {
		return err
	}
	var page *server.AuditList
	if a.server != "" {
		page, err = auditListServer(ctx, a)
	} else {
		page, err = auditListStore(ctx, a)
	}
	if err != nil {
		return err
	}
	if a.asJSON {
		return writeJSON(stdout, page)
	}
	return printAuditTable(stdout, stderr, page)
}

// auditListStore reads a page from the store directly.
func auditListStore(ctx context.Context, a *auditArgs) (*server.AuditList, error) {
	st, err := openTokenStore(ctx, a.store)
	if err != nil {
		return nil, err
	}
	res, err := st.AuditList(ctx, &a.p)
	if err = errors.Join(err, st.Close()); err != nil {
		return nil, err
	}
	return &server.AuditList{Entries: res.Entries, NextPageToken: res.NextCursor}, nil
}

// auditListServer reads a page through a server: GET /v1/audit, or with a
// namespace GET /v1/namespaces/{ns}/audit, which its admin may read too.
func auditListServer(ctx context.Context, a *auditArgs) (*server.AuditList, error) {
	hc, err := httpc.New(httpc.Config{Base: a.server, Token: a.token})
	if err != nil {
		return nil, err
	}
	defer hc.Close()
	q := url.Values{}
	for k, v := range map[string]string{"principal": a.p.Principal, "action": a.p.Action, "page_token": a.p.Cursor} {
		if v != "" {
			q.Set(k, v)
		}
	}
	for k, t := range map[string]time.Time{"since": a.p.Since, "until": a.p.Until} {
		if !t.IsZero() {
			q.Set(k, t.Format(time.RFC3339Nano))
		}
	}
	if a.p.Limit > 0 {
		q.Set("limit", strconv.Itoa(a.p.Limit))
	}
	path := "/v1/audit"
	if a.p.Namespace != "" {
		path = "/v1/namespaces/" + url.PathEscape(a.p.Namespace) + "/audit"
	}
	var page server.AuditList
	if _, err := hc.Do(ctx, httpc.Call{Method: "GET", Path: path, Query: q, Out: &page}); err != nil {
		return nil, err
	}
	return &page, nil
}

func printAuditTable(w, stderr io.Writer, page *server.AuditList) error {
	if len(page.Entries) == 0 {
		fmt.Fprintln(w, "no entries")
		return nil
	}
	tw := newTable(w)
	fmt.Fprintln(tw, "TIME\tPRINCIPAL\tACTION\tTARGET\tOUTCOME\tVIA\tSOURCE\tREQUEST\tDETAIL")
	for _, en := range page.Entries {
		target := en.Target.Type
		if id := en.Target.ID; id != "" {
			if en.Target.Namespace != "" && en.Target.Type != "namespace" {
				id = en.Target.Namespace + "/" + id
			}
			target += " " + id
		} else if en.Target.Namespace != "" {
			target += " in " + en.Target.Namespace
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", tableTime(en.Time), shown(en.Principal), en.Action,
			shown(target), en.Outcome, en.Via, en.Source, en.RequestID, oneLine(shown(en.Detail), detailWidth))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	printNextCursor(stderr, page.NextPageToken)
	return nil
}

// shown is text of an entry as a terminal may print it: a refused request's
// target may hold anything, quoted when it holds a control character.
func shown(s string) string {
	if strings.IndexFunc(s, unicode.IsControl) < 0 {
		return s
	}
	return strconv.Quote(s)
}
