package server

import (
	"context"
	"encoding/base64"
	"html"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/trellis-dev/trellis"
)

// pages lists every page of path with the query q and limit n, following
// next_page_token, and returns the run IDs in order and the tokens it got.
func (e *env) pages(path, q string, n int) (ids, tokens []string) {
	e.t.Helper()
	token := ""
	for range 100 {
		var p RunList
		query := q + "&limit=" + strconv.Itoa(n)
		if token != "" {
			query += "&page_token=" + url.QueryEscape(token)
		}
		e.do("GET", path+"?"+query, "admin", nil).want(e.t, 200).decode(e.t, &p)
		for _, r := range p.Runs {
			ids = append(ids, r.ID)
		}
		if token = p.NextCursor; token == "" {
			return ids, tokens
		}
		tokens = append(tokens, token)
	}
	e.t.Fatal("more than 100 pages")
	return nil, nil
}

// The API's page tokens are opaque (no sequence shows through) and bound to
// the namespace and filter they came from, on this store: used elsewhere,
// altered or forged, a token is refused 400; followed as given, the pages
// neither skip nor repeat a run, whatever the page size.
func TestPageTokensAreSealed(t *testing.T) {
	t.Parallel()
	e := newEnv(t, storeURLs(t)["sqlite"](t))
	batch := func(ns string, n int) {
		var runs []map[string]any
		for i := range n {
			runs = append(runs, map[string]any{"workflow": "nobody-serves", "queue": []string{"q1", "q2"}[i%2]})
		}
		e.do("POST", "/v1/namespaces/"+ns+"/runs:batch", "admin", map[string]any{"runs": runs}).want(t, 200)
	}
	batch("default", 7)
	batch("other", 30) // runs in another namespace: their number must not show in default's tokens
	runs := "/v1/namespaces/default/runs"
	var all RunList
	e.do("GET", runs+"?limit=1000", "admin", nil).want(t, 200).decode(t, &all)
	ids, tokens := e.pages(runs, "", 2)
	if len(all.Runs) != 7 || strings.Join(ids, ",") != strings.Join(runIDs(all.Runs), ",") || len(tokens) != 3 {
		t.Fatalf("paged %v (tokens %d), listed %v", ids, len(tokens), runIDs(all.Runs))
	}
	q1, _ := e.pages(runs, "queue=q1", 1)
	if len(q1) != 4 {
		t.Fatalf("queue q1 paged %d runs, want 4", len(q1))
	}
	seen := map[string]bool{}
	for _, tok := range tokens {
		raw, err := base64.RawURLEncoding.DecodeString(tok)
		if err != nil || len(raw) < 29 || regexp.MustCompile(`^[0-9]+$`).MatchString(tok) || seen[tok] {
			t.Fatalf("token %q: not an opaque sealed token (%v)", tok, err)
		}
		seen[tok] = true
	}
	tok := tokens[0]
	// The same list with another page size takes the token.
	var p RunList
	e.do("GET", runs+"?limit=5&page_token="+url.QueryEscape(tok), "admin", nil).want(t, 200).decode(t, &p)
	if len(p.Runs) != 5 || p.Runs[0].ID != ids[2] {
		t.Fatalf("token with limit=5: %v", runIDs(p.Runs))
	}
	altered := []byte(tok)
	altered[len(altered)/2] ^= 1
	if altered[len(altered)/2] == '-' || altered[len(altered)/2] == '_' {
		altered[len(altered)/2] = 'A'
	}
	other := newEnv(t, storeURLs(t)["sqlite"](t)) // another store: another key
	for name, c := range map[string]struct {
		e    *env
		path string
	}{
		"another namespace":       {e, "/v1/namespaces/other/runs?limit=2&page_token=" + url.QueryEscape(tok)},
		"another queue filter":    {e, runs + "?limit=2&queue=q1&page_token=" + url.QueryEscape(tok)},
		"another status filter":   {e, runs + "?limit=2&status=pending&page_token=" + url.QueryEscape(tok)},
		"another workflow filter": {e, runs + "?limit=2&workflow=x&page_token=" + url.QueryEscape(tok)},
		"another time filter":     {e, runs + "?limit=2&created_after=2000-01-01T00:00:00Z&page_token=" + url.QueryEscape(tok)},
		"the approvals list":      {e, "/v1/namespaces/default/approvals?limit=2&page_token=" + url.QueryEscape(tok)},
		"altered":                 {e, runs + "?limit=2&page_token=" + string(altered)},
		"truncated":               {e, runs + "?limit=2&page_token=" + tok[:len(tok)-2]},
		"a bare sequence":         {e, runs + "?limit=2&page_token=" + "5"},
		"another store":           {other, runs + "?limit=2&page_token=" + url.QueryEscape(tok)},
	} {
		p := c.e.do("GET", c.path, "admin", nil).problem(t, 400, "invalid_argument")
		if !strings.Contains(p.Detail, "page_token") {
			t.Errorf("%s: detail %q", name, p.Detail)
		}
	}
	// A status filter given in another order is the same filter.
	var st RunList
	e.do("GET", runs+"?limit=1&status=pending,running", "admin", nil).want(t, 200).decode(t, &st)
	e.do("GET", runs+"?limit=1&status=running,pending&page_token="+url.QueryEscape(st.NextCursor), "admin", nil).want(t, 200)
}

func runIDs(runs []*trellis.Run) []string {
	var ids []string
	for _, r := range runs {
		ids = append(ids, r.ID)
	}
	return ids
}

// The approvals list's tokens are sealed as the runs list's, bound to its
// status and run filters.
func TestApprovalPageTokensAreSealed(t *testing.T) {
	t.Parallel()
	e := newEnv(t, storeURLs(t)["sqlite"](t))
	var want []string
	for range 3 {
		run := e.start("needs-anyone", nil, nil)
		want = append([]string{e.pendingApproval(run.ID)}, want...)
	}
	approvals := "/v1/namespaces/default/approvals"
	var got []string
	token := ""
	for {
		var p trellis.ApprovalList
		e.do("GET", approvals+"?status=pending&limit=1&page_token="+url.QueryEscape(token), "reader", nil).want(t, 200).decode(t, &p)
		for _, a := range p.Approvals {
			got = append(got, a.ID)
		}
		if p.NextCursor == "" {
			break
		}
		if _, err := strconv.Atoi(p.NextCursor); err == nil {
			t.Fatalf("a bare sequence as token: %q", p.NextCursor)
		}
		token = p.NextCursor
	}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("paged %v, want %v", got, want)
	}
	for _, q := range []string{"status=approved", "", "status=pending&run=x"} {
		e.do("GET", approvals+"?limit=1&"+q+"&page_token="+url.QueryEscape(token), "reader", nil).problem(t, 400, "invalid_argument")
	}
	e.do("GET", "/v1/namespaces/other/approvals?status=pending&limit=1&page_token="+url.QueryEscape(token), "admin", nil).problem(t, 400, "invalid_argument")
}

// The Go client over a server and the web UI page with the sealed tokens as
// they did with bare ones: the client's List follows NextCursor, the UI's
// "Older" link carries its filter and token.
func TestClientsPageThroughSealedTokens(t *testing.T) {
	t.Parallel()
	e := newEnv(t, storeURLs(t)["sqlite"](t))
	var runs []map[string]any
	for range uiRunsPageSize + 5 {
		runs = append(runs, map[string]any{"workflow": "nobody-serves", "queue": "q1"})
	}
	e.do("POST", "/v1/namespaces/default/runs:batch", "admin", map[string]any{"runs": runs}).want(t, 200)
	c, err := trellis.Open(context.Background(), trellis.Config{Server: e.base, Token: "reader"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	n, cursor := 0, ""
	for {
		page, err := c.List(context.Background(), trellis.ListOptions{Queue: "q1", Limit: 20, Cursor: cursor})
		if err != nil {
			t.Fatal(err)
		}
		n += len(page.Runs)
		if cursor = page.NextCursor; cursor == "" {
			break
		}
	}
	if n != uiRunsPageSize+5 {
		t.Fatalf("the client paged %d runs, want %d", n, uiRunsPageSize+5)
	}
	u := e.uiSession("admin")
	first := u.get("/ui/default/runs?queue=q1")
	m := regexp.MustCompile(`href="([^"]*)" id="older"`).FindStringSubmatch(string(first.body))
	if first.status != 200 || m == nil {
		t.Fatalf("runs page: %d, no Older link", first.status)
	}
	older := html.UnescapeString(m[1])
	if !strings.Contains(older, "queue=q1") || !strings.Contains(older, "page_token=") {
		t.Fatalf("Older link %q", older)
	}
	next := u.get(older)
	if next.status != 200 || strings.Count(string(next.body), `data-status="pending"`) < 5 {
		t.Fatalf("the Older page: %d %.300s", next.status, next.body)
	}
	// The link's token with another filter is refused, as the API's.
	if r := u.get(strings.Replace(older, "queue=q1", "queue=q2", 1)); r.status != 400 {
		t.Fatalf("the Older link with another queue: %d", r.status)
	}
}
