package server

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/trellis-dev/trellis"
	"github.com/trellis-dev/trellis/internal/auth"
	"github.com/trellis-dev/trellis/internal/auth/storeauth"
	"github.com/trellis-dev/trellis/store"
)

// parentWF starts two children of echo with one Map (one op) and returns their outputs.
var parentWF = trellis.NewWorkflow("parent", func(wc *trellis.Context, _ any) (int, error) {
	outs, err := trellis.Map(wc, echoWF, []map[string]any{{"i": 0}, {"i": 1}})
	return len(outs), err
})

// A run's children, one approval request and runs by workflow ID, on SQLite and
// Postgres, with their bad inputs.
func TestAPIChildrenApprovalWorkflowID(t *testing.T) {
	for name, url := range storeURLs(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, url(t))
			if err := e.worker.Register(context.Background(), parentWF); err != nil {
				t.Fatal(err)
			}
			parent := e.start("parent", nil, map[string]any{"id": "fam"})
			if done := e.waitRun(parent.ID); done.Status != trellis.StatusSucceeded {
				t.Fatalf("parent %s %+v", done.Status, done.Error)
			}
			var h History
			e.do("GET", "/v1/namespaces/default/runs/fam/history", "reader", nil).want(t, 200).decode(t, &h)
			pos := -1
			for _, op := range h.Ops {
				if op.Kind == trellis.OpChild {
					pos = op.Position
				}
			}
			if pos < 0 {
				t.Fatalf("no child op in %+v", h.Ops)
			}
			var kids ChildList
			e.do("GET", "/v1/namespaces/default/runs/fam/children?position="+itoa(pos), "reader", nil).want(t, 200).decode(t, &kids)
			if len(kids.Runs) != 2 || kids.Runs[0].ParentID != parent.ID || string(kids.Runs[1].Output) != `{"i":1}` {
				t.Fatalf("children %+v", kids.Runs)
			}
			e.do("GET", "/v1/namespaces/default/runs/fam/children?position="+itoa(pos+100), "reader", nil).want(t, 200).decode(t, &kids)
			if len(kids.Runs) != 0 {
				t.Fatalf("children of a position without a child op: %+v", kids.Runs)
			}
			for _, q := range []string{"", "?position=", "?position=-1", "?position=x", "?position=99999999999", "?pos=1"} {
				e.do("GET", "/v1/namespaces/default/runs/fam/children"+q, "reader", nil).problem(t, 400, "invalid_argument")
			}
			e.do("GET", "/v1/namespaces/default/runs/nope/children?position=0", "reader", nil).problem(t, 404, "run_not_found")

			// Runs by workflow ID: a reset's new run shares it.
			var reset trellis.Run
			e.do("POST", "/v1/namespaces/default/runs/fam/reset", "producer", nil).want(t, 201).decode(t, &reset)
			var page trellis.RunPage
			e.do("GET", "/v1/namespaces/default/runs?workflow_id=fam", "reader", nil).want(t, 200).decode(t, &page)
			if len(page.Runs) != 2 || page.Runs[0].ID != reset.ID || page.Runs[1].ID != parent.ID {
				t.Fatalf("runs of workflow ID fam: %+v", page.Runs)
			}
			e.do("GET", "/v1/namespaces/default/runs?workflow_id=none", "reader", nil).want(t, 200).decode(t, &page)
			if len(page.Runs) != 0 {
				t.Fatalf("runs of an unknown workflow ID: %+v", page.Runs)
			}

			// One approval request, before and after its decision.
			run := e.start("needs-anyone", nil, nil)
			id := e.pendingApproval(run.ID)
			var a trellis.ApprovalRecord
			e.do("GET", "/v1/namespaces/default/approvals/"+id, "reader", nil).want(t, 200).decode(t, &a)
			if a.ID != id || a.RunID != run.ID || a.Status != trellis.ApprovalPending {
				t.Fatalf("approval %+v", a)
			}
			e.do("POST", "/v1/namespaces/default/approvals/"+id+"/approve", "approver", nil).want(t, 200)
			e.do("GET", "/v1/namespaces/default/approvals/"+id, "reader", nil).want(t, 200).decode(t, &a)
			if a.Status != trellis.ApprovalApproved || a.Principal != "approver" {
				t.Fatalf("decided approval %+v", a)
			}
			e.do("GET", "/v1/namespaces/default/approvals/nope", "reader", nil).problem(t, 404, "approval_not_found")
			e.do("GET", "/v1/namespaces/default/approvals/a%2Fb", "reader", nil).problem(t, 400, "invalid_argument")
			e.do("GET", "/v1/namespaces/default/approvals/"+id, "other-reader", nil).problem(t, 403, "permission_denied")
		})
	}
}

func itoa(i int) string { return strconv.Itoa(i) }

// Tokens through the server, by an admin of every namespace, with the store's
// tokens authenticating: the secret is answered once and stored hashed; an admin
// of one namespace, a reader and a revoked token are refused; bad bodies change
// nothing.
func TestAPITokens(t *testing.T) {
	for name, url := range storeURLs(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, url(t), func(c *Config) { c.Authenticator = storeauth.New(c.Backend, storeauth.Config{CacheTTL: -1}) })
			root, err := e.srv.BootstrapAdmin(context.Background())
			if err != nil || root == "" {
				t.Fatalf("bootstrap: %q %v", root, err)
			}
			var created CreatedToken
			r := e.do("POST", "/v1/tokens", root, map[string]any{"name": "ci",
				"grants": []map[string]any{{"role": "producer", "namespace": "default", "queue": "q1"}, {"role": "reader", "namespace": "*"}}}).want(t, 201)
			r.decode(t, &created)
			if !auth.LooksLikeToken(created.Secret) || created.Token.Name != "ci" || len(created.Token.Grants) != 2 || r.header.Get("Cache-Control") != "no-store" {
				t.Fatalf("created %+v (%s)", created, r.header)
			}
			// Stored hashed: the store finds it by the secret's hash, and its
			// answers never hold the secret.
			if tok, err := e.st.TokenByHash(context.Background(), &store.TokenByHashParams{Hash: auth.HashToken(created.Secret)}); err != nil || tok.Name != "ci" {
				t.Fatalf("by hash: %+v %v", tok, err)
			}
			list := e.do("GET", "/v1/tokens", root, nil).want(t, 200)
			if strings.Contains(string(list.body), created.Secret) {
				t.Fatal("the list shows a secret")
			}
			var tl TokenList
			list.decode(t, &tl)
			if len(tl.Tokens) != 2 || tl.Tokens[0].Name != "admin" || tl.Tokens[1].Name != "ci" {
				t.Fatalf("tokens %+v", tl.Tokens)
			}
			ciSecret := created.Secret
			// The new token works, as what it grants and nothing more.
			e.do("POST", "/v1/namespaces/default/runs", created.Secret, map[string]any{"workflow": "echo", "queue": "q1"}).want(t, 201)
			e.do("GET", "/v1/namespaces/other/runs", created.Secret, nil).want(t, 200)
			e.do("GET", "/v1/tokens", created.Secret, nil).problem(t, 403, "permission_denied")
			e.do("POST", "/v1/tokens", created.Secret, map[string]any{"name": "mine", "grants": []map[string]any{{"role": "admin", "namespace": "*"}}}).
				problem(t, 403, "permission_denied")

			// An admin of one namespace is no admin of the tokens.
			e.do("POST", "/v1/tokens", root, map[string]any{"name": "ns-admin", "grants": []map[string]any{{"role": "admin", "namespace": "default"}}}).want(t, 201).decode(t, &created)
			nsAdmin := created.Secret
			e.do("GET", "/v1/tokens", nsAdmin, nil).problem(t, 403, "permission_denied")
			e.do("POST", "/v1/tokens/ci/revoke", nsAdmin, nil).problem(t, 403, "permission_denied")

			before := len(tokensOf(t, e))
			for _, c := range []struct {
				name, body string
				status     int
				code       string
			}{
				{"duplicate name", `{"name":"ci","grants":[{"role":"reader","namespace":"*"}]}`, 409, "token_exists"},
				{"no grant", `{"name":"x","grants":[]}`, 400, "invalid_argument"},
				{"no name", `{"grants":[{"role":"reader","namespace":"*"}]}`, 400, "invalid_argument"},
				{"name with a space", `{"name":"a b","grants":[{"role":"reader","namespace":"*"}]}`, 400, "invalid_argument"},
				{"unknown role", `{"name":"x","grants":[{"role":"root","namespace":"*"}]}`, 400, "invalid_argument"},
				{"system namespace", `{"name":"x","grants":[{"role":"admin","namespace":"__system__"}]}`, 400, "invalid_argument"},
				{"no namespace", `{"name":"x","grants":[{"role":"admin"}]}`, 400, "invalid_argument"},
				{"unknown field", `{"name":"x","secret":"mine","grants":[{"role":"reader","namespace":"*"}]}`, 400, "invalid_argument"},
				{"malformed JSON", `{"name":`, 400, "invalid_argument"},
			} {
				t.Run(c.name, func(t *testing.T) {
					e.do("POST", "/v1/tokens", root, c.body).problem(t, c.status, c.code)
				})
			}
			e.do("POST", "/v1/tokens", root, `{"name":"x","grants":[{"role":"reader","namespace":"*"}]}`, "Content-Type", "text/plain").
				problem(t, 415, "unsupported_media_type")
			if after := len(tokensOf(t, e)); after != before {
				t.Fatalf("refused creates changed the tokens: %d, then %d", before, after)
			}

			// Revoke: at once (no cache here), for ever; the name stays taken.
			var revoked store.Token
			e.do("POST", "/v1/tokens/ci/revoke", root, nil).want(t, 200).decode(t, &revoked)
			if revoked.Name != "ci" || revoked.RevokedAt == nil {
				t.Fatalf("revoked %+v", revoked)
			}
			e.do("GET", "/v1/namespaces/other/runs", ciSecret, nil).problem(t, 401, "unauthenticated")
			e.do("GET", "/v1/namespaces/default/runs", nsAdmin, nil).want(t, 200)
			e.do("POST", "/v1/tokens/ci/revoke", root, nil).want(t, 200)
			e.do("POST", "/v1/tokens/nobody/revoke", root, nil).problem(t, 404, "token_not_found")
			e.do("POST", "/v1/tokens/a%20b/revoke", root, nil).problem(t, 400, "invalid_argument")
			e.do("POST", "/v1/tokens/ci/revoke", root, `{"x":1}`).problem(t, 400, "invalid_argument")
			e.do("GET", "/v1/tokens", "", nil).problem(t, 401, "unauthenticated")
		})
	}
}

func tokensOf(t *testing.T, e *env) []*store.Token {
	t.Helper()
	ts, err := e.st.TokenList(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return ts
}
