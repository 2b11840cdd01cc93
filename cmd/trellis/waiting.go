package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/trellis-dev/trellis"
)

func runsSendEvent(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	about := "Send an event to a run: it waits in the run's inbox until the run takes it\n(trellis.WaitEvent), and wakes the run at once if it waits for that name."
	var name, payload string
	addFlags := func(fs *flag.FlagSet) {
		fs.StringVar(&name, "name", "", "event `name` (required)")
		fs.StringVar(&payload, "payload", "null", "event payload, as `JSON`")
	}
	return withRun(ctx, "send-event", about, args, stderr, addFlags, func(c *trellis.Client, ref string) error {
		if name == "" {
			return &usageError{msg: "runs send-event: --name is required", cmd: "runs send-event"}
		}
		if !json.Valid([]byte(payload)) {
			return &usageError{msg: fmt.Sprintf("runs send-event: --payload is not valid JSON: %s", payload), cmd: "runs send-event"}
		}
		if err := c.SendEvent(ctx, ref, name, json.RawMessage(payload)); err != nil {
			return refError(ref, err)
		}
		fmt.Fprintf(stdout, "event %q sent to %s\n", name, ref)
		return nil
	})
}

const approvalsUsage = `Usage: trellis approvals <subcommand> [arguments] (--store URL | --server URL --token T)

Subcommands:
  list      list approval requests, newest first
  approve   approve a pending request
  reject    reject a pending request

Flags of every subcommand:
  --store URL        the store (default $TRELLIS_STORE)
  --server URL       a Trellis server instead of a store (default $TRELLIS_SERVER);
                     approve and reject then decide as the token's principal
  --token T          the bearer token for --server (default $TRELLIS_TOKEN)
  --namespace NAME   the runs' namespace (default $TRELLIS_NAMESPACE, else "default")

"trellis approvals <subcommand> -h" shows a subcommand's flags.
`

func runApprovals(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	printUsage := func(w io.Writer) { fmt.Fprint(w, approvalsUsage) }
	if len(args) == 0 {
		return &usageError{msg: "approvals: no subcommand given", cmd: "approvals"}
	}
	switch sub, rest := args[0], args[1:]; sub {
	case "list":
		return approvalsList(ctx, rest, stdout, stderr)
	case "approve":
		return approvalsDecide(ctx, "approve", rest, stdout, stderr)
	case "reject":
		return approvalsDecide(ctx, "reject", rest, stdout, stderr)
	case "help", "-h", "-help", "--help":
		return &helpError{usage: printUsage}
	default:
		return &usageError{msg: fmt.Sprintf("approvals: unknown subcommand %q", sub), cmd: "approvals"}
	}
}

func approvalsList(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("approvals list", "approvals list --store URL|--server URL [flags]", "List approval requests, newest first.", stderr)
	var tg target
	var status, runID, cursor string
	var limit int
	var asJSON bool
	targetFlags(fs, &tg)
	fs.StringVar(&status, "status", "", "only requests in these states, comma-separated: pending, approved, rejected, expired")
	fs.StringVar(&runID, "run", "", "only requests of this `run` (a run ID, or a workflow ID for its latest run)")
	fs.IntVar(&limit, "limit", 0, "page size: default 100, at most 1000")
	fs.StringVar(&cursor, "cursor", "", "continue from the `cursor` a previous page printed")
	fs.BoolVar(&asJSON, "json", false, "print the page as JSON")
	pos, err := parseArgs(fs, args)
	switch {
	case err != nil:
		return err
	case len(pos) > 0:
		return usagef(fs, "approvals list: unexpected argument %q", pos[0])
	}
	if err := tg.resolve(fs); err != nil {
		return err
	}
	f := trellis.ApprovalFilter{Run: runID, Limit: limit, Cursor: cursor}
	for s := range strings.SplitSeq(status, ",") {
		switch s = strings.TrimSpace(s); trellis.ApprovalStatus(s) {
		case "":
		case trellis.ApprovalPending, trellis.ApprovalApproved, trellis.ApprovalRejected, trellis.ApprovalExpired:
			f.Statuses = append(f.Statuses, trellis.ApprovalStatus(s))
		default:
			return usagef(fs, "approvals list: unknown status %q (want pending, approved, rejected or expired)", s)
		}
	}
	return withClient(ctx, tg, func(c *trellis.Client) error {
		if f.Run != "" {
			run, err := c.Get(ctx, f.Run)
			if err != nil {
				return refError(f.Run, err)
			}
			f.Run = run.ID
		}
		page, err := c.Approvals(ctx, f)
		if err != nil {
			return err
		}
		if asJSON {
			return writeJSON(stdout, page)
		}
		tw := newTable(stdout)
		fmt.Fprintln(tw, "ID\tRUN\tNAME\tSTATUS\tSUBJECT\tCREATED\tDECIDED BY")
		for _, a := range page.Approvals {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", a.ID, a.RunID, a.Name, a.Status, a.Subject,
				tableTime(a.CreatedAt), a.Principal)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		printNextCursor(stderr, page.NextCursor)
		return nil
	})
}

func approvalsDecide(ctx context.Context, verb string, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("approvals "+verb, "approvals "+verb+" (<id> | <run> <name>) (--as PRINCIPAL --store URL | --server URL --token T) [--comment TEXT]",
		"Decide a pending approval request, named by its ID, or by its run (a run ID, or a\n"+
			"workflow ID for its latest run) and the approval's name. The run resumes and its\n"+
			"history records the decision.", stderr)
	var tg target
	var principal, comment string
	targetFlags(fs, &tg)
	fs.StringVar(&principal, "as", "", "the deciding `principal` (required with --store; through --server the token's principal decides and --as is ignored)")
	fs.StringVar(&comment, "comment", "", "a comment recorded with the decision")
	pos, err := parseArgs(fs, args)
	switch {
	case err != nil:
		return err
	case len(pos) == 0 || len(pos) > 2:
		return usagef(fs, "approvals %s: want an approval id, or a run and an approval name", verb)
	}
	if err := tg.resolve(fs); err != nil {
		return err
	}
	if principal == "" && tg.server == "" {
		return usagef(fs, "approvals %s: --as is required", verb)
	}
	return withClient(ctx, tg, func(c *trellis.Client) error {
		id := pos[0]
		if len(pos) == 2 {
			if id, err = findApproval(ctx, c, pos[0], pos[1]); err != nil {
				return err
			}
		}
		decide := c.Approve
		if verb == "reject" {
			decide = c.Reject
		}
		a, err := decide(ctx, id, principal, comment)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "approval %s %s by %s; run %s resumes\n", a.ID, a.Status, a.Principal, a.RunID)
		return nil
	})
}

// findApproval returns the ID of the approval request named name of run ref: the
// pending one, else the latest (deciding it then reports that it was decided).
func findApproval(ctx context.Context, c *trellis.Client, ref, name string) (string, error) {
	run, err := c.Get(ctx, ref)
	if err != nil {
		return "", refError(ref, err)
	}
	var pending, all []*trellis.ApprovalRecord
	f := trellis.ApprovalFilter{Run: run.ID, Limit: 1000}
	for {
		page, err := c.Approvals(ctx, f)
		if err != nil {
			return "", err
		}
		for _, a := range page.Approvals {
			if a.Name != name {
				continue
			}
			all = append(all, a)
			if a.Status == trellis.ApprovalPending {
				pending = append(pending, a)
			}
		}
		if f.Cursor = page.NextCursor; f.Cursor == "" {
			break
		}
	}
	switch {
	case len(pending) == 1:
		return pending[0].ID, nil
	case len(pending) > 1:
		return "", fmt.Errorf("run %s has %d pending approval requests named %q: give one of their IDs (trellis approvals list --run %s)",
			run.ID, len(pending), name, run.ID)
	case len(all) > 0:
		return all[0].ID, nil // newest first
	}
	return "", fmt.Errorf("run %s: %w: none named %q", run.ID, trellis.ErrApprovalNotFound, name)
}
