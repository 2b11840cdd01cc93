package trellis_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/trellis-dev/trellis"
)

// A run that waits for an event and an approval holds no worker while it waits;
// SendEvent and Approve wake it.
func ExampleWaitEvent() {
	dir, _ := os.MkdirTemp("", "trellis-example")
	defer os.RemoveAll(dir)
	ctx := context.Background()
	db, err := trellis.Open(ctx, trellis.Config{Store: "sqlite://" + filepath.Join(dir, "trellis.db")})
	if err != nil {
		panic(err)
	}
	defer db.Close()

	refund := trellis.NewWorkflow("refund", func(wc *trellis.Context, amount int) (string, error) {
		receipt, err := trellis.WaitEvent[string](wc, "receipt", time.Hour)
		if err != nil {
			return "", err
		}
		d, err := trellis.Approval(wc, "refund-over-1000", trellis.ApprovalOptions{
			Approvers: []string{"finance"}, Subject: fmt.Sprintf("refund %d", amount),
		})
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("%s: approved=%v by %s", receipt, d.Approved, d.Principal), nil
	})
	if err := db.Register(ctx, refund); err != nil {
		panic(err)
	}
	h, err := trellis.Start(ctx, db, refund, 1500, trellis.StartOptions{ID: "refund-7"})
	if err != nil {
		panic(err)
	}
	if err := db.SendEvent(ctx, "refund-7", "receipt", "receipt R-1"); err != nil {
		panic(err)
	}
	for { // until the run asks for its approval
		page, err := db.Approvals(ctx, trellis.ApprovalFilter{Run: h.RunID()})
		if err != nil {
			panic(err)
		}
		if len(page.Approvals) == 1 {
			if _, err := db.Approve(ctx, page.Approvals[0].ID, "alice", "within policy"); err != nil {
				panic(err)
			}
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	out, err := h.Result(ctx)
	fmt.Println(out, err)
	// Output: receipt R-1: approved=true by alice <nil>
}
