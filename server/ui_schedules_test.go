package server

import (
	"context"
	"errors"
	"html/template"
	"net/url"
	"strings"
	"testing"

	"github.com/trellis-dev/trellis"
	"github.com/trellis-dev/trellis/internal/auth"
	"github.com/trellis-dev/trellis/store"
)

// uiWalkSchedule gives namespace default a schedule "walk-s" (paused: it starts
// runs only when triggered) for the walk of the UI's routes.
func uiWalkSchedule(t *testing.T, e *env) {
	t.Helper()
	_, err := e.worker.CreateSchedule(context.Background(), "walk-s", trellis.ScheduleSpec{Workflow: "echo", Cron: "@hourly"},
		trellis.CreateScheduleOptions{Paused: true})
	if err != nil && !errors.Is(err, trellis.ErrScheduleExists) {
		t.Fatal(err)
	}
}

// The schedules page lists the namespace's schedules; an admin creates one
// from its form, pauses, resumes and triggers it; a producer only triggers; a
// reader sees no form or button and is refused each form; refused input (a bad
// cron, input that is not JSON, a name taken, an unknown schedule) shows the
// page again with why and changes nothing.
func TestUISchedules(t *testing.T) {
	for name, url := range storeURLs(t) {
		t.Run(name, func(t *testing.T) { testUISchedules(t, url(t)) })
	}
}

func testUISchedules(t *testing.T, dbURL string) {
	e := newEnv(t, dbURL, withOperator)
	ctx := context.Background()
	admin, producer, reader := e.uiSession("admin"), e.uiSession("operator"), e.uiSession("reader")
	schedules := func() []*trellis.Schedule {
		t.Helper()
		list, err := e.worker.ListSchedules(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return list
	}
	if page := string(admin.get("/ui/default/schedules").want(t, 200).body); !strings.Contains(page, `id="no-schedules"`) || !strings.Contains(page, `id="s-create"`) {
		t.Fatalf("empty schedules page: %.600s", page)
	}
	form := func(u *uiClient, kv ...string) url.Values {
		v := url.Values{"csrf": {u.csrf()}}
		for i := 0; i+1 < len(kv); i += 2 {
			v.Set(kv[i], kv[i+1])
		}
		return v
	}
	create := func(kv ...string) *resp {
		return admin.post("/ui/default/schedules", form(admin, kv...), e.base)
	}
	// Refused input: the page again, with the reason and what was typed.
	for _, c := range []struct {
		kv     []string
		status int
		says   string
	}{
		{[]string{"name", "nightly", "workflow", "echo", "cron", "61 * * * *"}, 400, "cron"},
		{[]string{"name", "nightly", "workflow", "echo", "cron", ""}, 400, "cron is required"},
		{[]string{"name", "nightly", "workflow", "echo", "cron", "@hourly", "input", "{not json"}, 400, "not JSON"},
		{[]string{"name", "nightly", "workflow", "echo", "cron", "@hourly", "time_zone", "Mars/Olympus"}, 400, "Mars/Olympus"},
		{[]string{"name", "bad/name", "workflow", "echo", "cron", "@hourly"}, 400, "schedule"},
		{[]string{"name", "nightly", "workflow", "", "cron", "@hourly"}, 400, "workflow"},
	} {
		r := create(c.kv...)
		page := string(r.body)
		if r.status != c.status || !strings.Contains(page, `id="schedule-form-error"`) || !strings.Contains(page, c.says) {
			t.Errorf("create %v: %d, want %d saying %q: %.800s", c.kv, r.status, c.status, c.says, page)
		}
		if !strings.Contains(page, `id="s-cron" value="`+template.HTMLEscapeString(c.kv[5])+`"`) {
			t.Errorf("create %v: the form does not keep what was typed", c.kv)
		}
	}
	if n := len(schedules()); n != 0 {
		t.Fatalf("refused forms created %d schedules", n)
	}
	r := create("name", "nightly", "workflow", "echo", "cron", "0 3 * * *", "time_zone", "Europe/Berlin", "input", `{"n": 1}`, "overlap", "allow_all")
	if r.status != 303 || r.header.Get("Location") != "/ui/default/schedules?created=nightly" {
		t.Fatalf("create: %d %s %.500s", r.status, r.header.Get("Location"), r.body)
	}
	sc, err := e.worker.GetSchedule(ctx, "nightly")
	if err != nil || sc.Paused || sc.Spec.Cron != "0 3 * * *" || sc.Spec.TimeZone != "Europe/Berlin" || string(sc.Spec.Input) != `{"n": 1}` ||
		sc.Spec.Overlap != trellis.OverlapAllowAll || sc.NextFireAt == nil {
		t.Fatalf("created schedule: %+v %v", sc, err)
	}
	if r := create("name", "nightly", "workflow", "echo", "cron", "@hourly"); r.status != 409 || !strings.Contains(string(r.body), "nightly") {
		t.Fatalf("create a name taken: %d %.500s", r.status, r.body)
	}
	if sc2, _ := e.worker.GetSchedule(ctx, "nightly"); sc2.Spec.Cron != "0 3 * * *" {
		t.Fatal("a refused create changed the schedule of its name")
	}
	page := string(admin.get("/ui/default/schedules?created=nightly").want(t, 200).body)
	for _, want := range []string{`data-schedule="nightly"`, "0 3 * * *", "Europe/Berlin", "echo", `class="next-fire">in `, "active",
		`id="schedule-notice"`, "pause-schedule", "trigger-schedule", "overlap: allow_all"} {
		if !strings.Contains(page, want) {
			t.Errorf("schedules page lacks %q", want)
		}
	}

	// Pause and resume.
	if r := admin.post("/ui/default/schedules/nightly/pause", form(admin), e.base); r.status != 303 {
		t.Fatalf("pause: %d %.300s", r.status, r.body)
	}
	if sc, _ := e.worker.GetSchedule(ctx, "nightly"); !sc.Paused {
		t.Fatal("pause did not pause")
	}
	if page := string(admin.get("/ui/default/schedules").body); !strings.Contains(page, "none while paused") || !strings.Contains(page, "resume-schedule") {
		t.Errorf("a paused schedule's row: %.1500s", page)
	}
	if r := admin.post("/ui/default/schedules/nightly/resume", form(admin), e.base); r.status != 303 {
		t.Fatalf("resume: %d", r.status)
	}
	if sc, _ := e.worker.GetSchedule(ctx, "nightly"); sc.Paused {
		t.Fatal("resume did not resume")
	}
	// An unknown schedule: the page says so, with a 404.
	for _, act := range []string{"pause", "resume", "trigger"} {
		r := admin.post("/ui/default/schedules/nope/"+act, form(admin), e.base)
		if r.status != 404 || !strings.Contains(string(r.body), `id="schedule-error"`) || !strings.Contains(string(r.body), "nope") {
			t.Errorf("%s an unknown schedule: %d %.500s", act, r.status, r.body)
		}
	}

	// A producer (and reader: the page is a reader's) triggers (a run starts, linked from the notice) but sees no
	// pause and no form, and is refused them.
	before := e.runCount()
	r = producer.post("/ui/default/schedules/nightly/trigger", form(producer), e.base)
	if r.status != 303 || !strings.HasPrefix(r.header.Get("Location"), "/ui/default/schedules?") {
		t.Fatalf("trigger: %d %s %.300s", r.status, r.header.Get("Location"), r.body)
	}
	if e.runCount() != before+1 {
		t.Fatalf("trigger started %d runs", e.runCount()-before)
	}
	page = string(producer.get(r.header.Get("Location")).want(t, 200).body)
	if !strings.Contains(page, "Triggered: started run") || !strings.Contains(page, "trigger-schedule") ||
		strings.Contains(page, "pause-schedule") || strings.Contains(page, `id="s-create"`) {
		t.Errorf("the producer's schedules page after a trigger: %.1500s", page)
	}
	if r := producer.post("/ui/default/schedules/nightly/pause", form(producer), e.base); r.status != 403 {
		t.Errorf("a producer's pause: %d", r.status)
	}
	if r := producer.post("/ui/default/schedules", form(producer, "name", "p", "workflow", "echo", "cron", "@hourly"), e.base); r.status != 403 {
		t.Errorf("a producer's create: %d", r.status)
	}
	// A reader sees the schedule and nothing to press.
	page = string(reader.get("/ui/default/schedules").want(t, 200).body)
	if !strings.Contains(page, `data-schedule="nightly"`) || strings.Contains(page, "<button") && strings.Contains(page, "schedule\"") ||
		strings.Contains(page, "trigger-schedule") || strings.Contains(page, `id="s-create"`) {
		t.Errorf("the reader's schedules page: %.1500s", page)
	}
	for _, path := range []string{"/ui/default/schedules/nightly/trigger", "/ui/default/schedules/nightly/pause"} {
		if r := reader.post(path, form(reader), e.base); r.status != 403 {
			t.Errorf("a reader's %s: %d", path, r.status)
		}
	}
	if sc, _ := e.worker.GetSchedule(ctx, "nightly"); sc.Paused || len(schedules()) != 1 {
		t.Fatal("refused forms changed the schedules")
	}
	// A forged CSRF token changes nothing.
	if r := admin.post("/ui/default/schedules/nightly/pause", url.Values{"csrf": {"forged"}}, e.base); r.status != 403 {
		t.Fatalf("pause with a forged CSRF token: %d", r.status)
	}
	// The forms are audited as the API's routes are.
	if err := e.srv.auditor.flush(ctx); err != nil {
		t.Fatal(err)
	}
	entries, err := e.st.AuditList(ctx, &store.AuditListParams{Namespace: "default", Action: "schedule.*", Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for _, en := range entries.Entries {
		if en.Via == "ui" {
			seen[en.Action+" "+en.Outcome]++
		}
	}
	if seen["schedule.create ok"] != 1 || seen["schedule.pause ok"] != 1 || seen["schedule.trigger ok"] != 1 || seen["schedule.create invalid_argument"] == 0 {
		t.Errorf("audit of the schedule forms: %v", seen)
	}
}

// withOperator adds the test token "operator": reader and producer of
// namespace default, who may see the schedules and trigger them.
func withOperator(c *Config) {
	toks := testTokens()
	toks["operator"] = &auth.Principal{Name: "operator", Grants: []auth.Grant{
		{Role: auth.RoleReader, Namespace: "default"}, {Role: auth.RoleProducer, Namespace: "default"}}}
	c.Authenticator = toks
}
