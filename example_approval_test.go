package trellis_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/trellis-dev/trellis"
)

// Approval asks people for a decision and waits for it without holding a
// worker; Client.Approvals lists the requests and Client.Reject (or Approve)
// decides one, with the deciding principal and a comment recorded in history.
func ExampleApproval() {
	dir, _ := os.MkdirTemp("", "trellis-example")
	defer os.RemoveAll(dir)
	ctx := context.Background()
	db, err := trellis.Open(ctx, trellis.Config{Store: "sqlite://" + filepath.Join(dir, "trellis.db")})
	if err != nil {
		panic(err)
	}
	defer db.Close()

	deploy := trellis.NewWorkflow("deploy", func(wc *trellis.Context, version string) (string, error) {
		d, err := trellis.Approval(wc, "go-live", trellis.ApprovalOptions{
			Approvers: []string{"release-managers"}, Subject: "deploy " + version,
		})
		if err != nil {
			return "", err
		}
		if !d.Approved {
			return fmt.Sprintf("not deployed: %s said %q", d.Principal, d.Comment), nil
		}
		return "deployed " + version, nil
	})
	if err := db.Register(ctx, deploy); err != nil {
		panic(err)
	}
	h, err := trellis.Start(ctx, db, deploy, "v2.1.0")
	if err != nil {
		panic(err)
	}
	for { // an approver's inbox: the pending requests
		page, err := db.Approvals(ctx, trellis.ApprovalFilter{Statuses: []trellis.ApprovalStatus{trellis.ApprovalPending}})
		if err != nil {
			panic(err)
		}
		if len(page.Approvals) > 0 {
			a := page.Approvals[0]
			fmt.Println(a.Name, a.Subject, a.Approvers)
			if _, err := db.Reject(ctx, a.ID, "bob", "freeze until Monday"); err != nil {
				panic(err)
			}
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	fmt.Println(h.Result(ctx))
	// Output:
	// go-live deploy v2.1.0 [release-managers]
	// not deployed: bob said "freeze until Monday" <nil>
}

// RequestApproval returns a future: with Select and a timer, a request that
// nobody decides in time escalates.
func ExampleRequestApproval() {
	dir, _ := os.MkdirTemp("", "trellis-example")
	defer os.RemoveAll(dir)
	ctx := context.Background()
	db, err := trellis.Open(ctx, trellis.Config{Store: "sqlite://" + filepath.Join(dir, "trellis.db")})
	if err != nil {
		panic(err)
	}
	defer db.Close()

	expense := trellis.NewWorkflow("expense", func(wc *trellis.Context, amount int) (string, error) {
		manager := trellis.RequestApproval(wc, "manager", trellis.ApprovalOptions{Approvers: []string{"managers"}})
		escalate := wc.NewTimer(50 * time.Millisecond) // in production: two days
		i, err := trellis.Select(wc, manager, escalate)
		if err != nil {
			return "", err
		}
		if i == 1 {
			return "escalated to finance", nil
		}
		d, err := manager.Get(wc)
		return fmt.Sprint("approved: ", d.Approved), err
	})
	if err := db.Register(ctx, expense); err != nil {
		panic(err)
	}
	h, err := trellis.Start(ctx, db, expense, 120)
	if err != nil {
		panic(err)
	}
	fmt.Println(h.Result(ctx))
	// Output: escalated to finance <nil>
}
