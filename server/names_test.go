package server

import (
	"context"
	"strings"
	"testing"

	"github.com/trellis-dev/trellis/store"
)

// Names and grants follow the store's one rule (store.ValidateNamespace,
// ValidateName, ValidateTokenName, ValidateGrant) through the API: no '/', no
// wildcard but a grant's "*" namespace, no white space or control character.
// Each refusal is 400 and creates nothing; names that keep the rule, such as
// those of the docs and tests, are taken.
func TestNamesFollowOneRule(t *testing.T) {
	t.Parallel()
	e := newEnv(t, storeURLs(t)["sqlite"](t))
	before := e.runCount()
	grant := func(role, ns, queue string) string {
		return `{"name":"t","grants":[{"role":"` + role + `","namespace":"` + ns + `","queue":"` + queue + `"}]}`
	}
	spec := func(workflow, queue string) string {
		return `{"name":"s","spec":{"workflow":"` + workflow + `","queue":"` + queue + `","cron":"@daily"}}`
	}
	for _, c := range []struct{ name, method, path, body, says string }{
		{"token name with a slash", "POST", "/v1/tokens", `{"name":"ci/deploy","grants":[{"role":"reader","namespace":"*"}]}`, `token name "ci/deploy": no '/'`},
		{"token name with a wildcard", "POST", "/v1/tokens", `{"name":"ci*","grants":[{"role":"reader","namespace":"*"}]}`, "'*'"},
		{"token name with a control character", "POST", "/v1/tokens", `{"name":"ci\u001b[31m","grants":[{"role":"reader","namespace":"*"}]}`, "control"},
		{"token name with a format character", "POST", "/v1/tokens", `{"name":"ci\u202eed","grants":[{"role":"reader","namespace":"*"}]}`, "control"},
		{"grant on a namespace with a slash", "POST", "/v1/tokens", grant("reader", "a/b", ""), `namespace name "a/b"`},
		{"grant on a namespace pattern", "POST", "/v1/tokens", grant("reader", "ns*", ""), `namespace name "ns*"`},
		{"grant on the system namespace", "POST", "/v1/tokens", grant("admin", "__system__", ""), "reserved"},
		{"grant on a queue with a slash", "POST", "/v1/tokens", grant("worker", "default", "a/b"), `queue name "a/b"`},
		{"grant on a queue pattern", "POST", "/v1/tokens", grant("worker", "default", "q*"), `queue name "q*"`},
		{"grant on a queue ..", "POST", "/v1/tokens", grant("worker", "default", ".."), `queue name ".."`},
		{"namespace with a wildcard", "POST", "/v1/namespaces", `{"name":"ns*"}`, `namespace name "ns*"`},
		{"namespace's default queue with a slash", "POST", "/v1/namespaces", `{"name":"ns","default_queue":"a/b"}`, `default queue name "a/b"`},
		{"queue with a wildcard", "POST", "/v1/namespaces/default/queues", `{"name":"q*"}`, `queue name "q*"`},
		{"queue with a no-break space", "POST", "/v1/namespaces/default/queues", `{"name":"a\u00a0b"}`, "white space"},
		{"start in a queue with a wildcard", "POST", "/v1/namespaces/default/runs", `{"workflow":"echo","queue":"*"}`, `queue name "*"`},
		{"start of a workflow with a space", "POST", "/v1/namespaces/default/runs", `{"workflow":"e cho"}`, `workflow name "e cho"`},
		{"batch start in a queue ..", "POST", "/v1/namespaces/default/runs:batch", `{"runs":[{"workflow":"echo","queue":".."}]}`, `queue name ".."`},
		{"schedule with a slash", "POST", "/v1/namespaces/default/schedules", `{"name":"a/b","spec":{"workflow":"echo","cron":"@daily"}}`, `schedule name "a/b"`},
		{"schedule of a workflow with a wildcard", "POST", "/v1/namespaces/default/schedules", spec("echo*", "default"), `workflow name "echo*"`},
		{"schedule in a queue with a tab", "POST", "/v1/namespaces/default/schedules", spec("echo", `a\tb`), "white space"},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := e.do(c.method, c.path, "admin", c.body).problem(t, 400, "invalid_argument")
			if !strings.Contains(p.Detail, c.says) {
				t.Fatalf("detail %q does not say %q", p.Detail, c.says)
			}
		})
	}
	ctx := context.Background()
	tokens, _ := e.st.TokenList(ctx)
	nss, _ := e.st.NamespaceList(ctx)
	queues, _ := e.st.QueueList(ctx, &store.QueueListParams{Namespace: "default"})
	scheds, _ := e.st.ScheduleList(ctx, &store.ScheduleListParams{})
	if len(tokens) != 0 || len(nss) != 1 || len(queues) != 0 || len(scheds) != 0 || e.runCount() != before {
		t.Fatalf("refused requests left tokens %v, namespaces %v, queues %v, schedules %v, %d runs (want %d)",
			tokens, nss, queues, scheds, e.runCount(), before)
	}
	// The names of the docs and tests keep the rule.
	e.do("POST", "/v1/tokens", "admin", `{"name":"ci","grants":[{"role":"producer","namespace":"shop","queue":"emails"},{"role":"reader","namespace":"*"}]}`).want(t, 201)
	e.do("POST", "/v1/tokens", "admin", `{"name":"deploy-bot.eu_1:west","grants":[{"role":"worker","namespace":"bench","queue":"eu:west-1"}]}`).want(t, 201)
	e.do("POST", "/v1/namespaces", "admin", `{"name":"shop.eu_1-a","default_queue":"emails"}`).want(t, 201)
	e.do("POST", "/v1/namespaces/default/queues", "admin", `{"name":"payments.eu-1_ü"}`).want(t, 201)
	e.do("POST", "/v1/namespaces/default/schedules", "admin", `{"name":"nightly-report","spec":{"workflow":"echo","cron":"@daily"}}`).want(t, 201)
}
