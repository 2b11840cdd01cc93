package trellis_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/trellis-dev/trellis"
	"github.com/trellis-dev/trellis/internal/pgtest"
	"github.com/trellis-dev/trellis/store"
)

// TestPostgresScaleOut runs three worker processes and two client processes on one
// PostgreSQL schema. The clients start scaleRuns runs between them and wait for
// every result; the test then checks that each run was claimed once and finished,
// that each step executed and was recorded exactly once, and that every worker did
// a share of the work. Wake-ups cross processes by LISTEN/NOTIFY only: the fallback
// poll is set far longer than the test.

const (
	envScaleRole    = "TRELLIS_SCALE_ROLE" // worker-N or client-N
	envScaleStore   = "TRELLIS_SCALE_STORE"
	envScaleEffects = "TRELLIS_SCALE_EFFECTS"
	scaleRuns       = 300
	scaleClients    = 2
	scaleWorkers    = 3
	scaleSteps      = 3
)

// scaleWorkflow runs scaleSteps steps; each appends "run position worker" to the
// effects file and returns the worker's name.
func scaleWorkflow(effects, worker string) *trellis.Workflow[int, string] {
	return trellis.NewWorkflow("scale", func(wc *trellis.Context, n int) (string, error) {
		var last string
		for i := range scaleSteps {
			s, err := trellis.Step(wc, fmt.Sprintf("step-%d", i), func(ctx context.Context) (string, error) {
				time.Sleep(time.Duration(1+rand.IntN(3)) * time.Millisecond)
				info := trellis.StepInfo(ctx)
				return worker, appendLine(effects, fmt.Sprintf("%s %d %s\n", info.RunID, info.Position, worker))
			})
			if err != nil {
				return "", err
			}
			last = s
		}
		return last, nil
	})
}

// TestScaleOutProcess is a worker or client process of TestPostgresScaleOut.
func TestScaleOutProcess(t *testing.T) {
	role := os.Getenv(envScaleRole)
	if role == "" {
		t.Skip("runs only as a process of TestPostgresScaleOut")
	}
	url, effects := os.Getenv(envScaleStore), os.Getenv(envScaleEffects)
	cfg := trellis.Config{Store: url}
	cfg.Worker.Name = role
	cfg.Worker.PollInterval = time.Hour // push only
	cfg.Worker.ClaimBatch = 8
	cfg.Worker.Concurrency = 16
	cfg.Worker.Disabled = strings.HasPrefix(role, "client")
	c, err := trellis.Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	wf := scaleWorkflow(effects, role)
	if !cfg.Worker.Disabled {
		if err := c.Register(context.Background(), wf); err != nil {
			t.Fatal(err)
		}
		select {} // until killed
	}
	runClient(t, c, wf, role)
}

// runClient starts this client's share of the runs, eight at a time, and waits for
// each result.
func runClient(t *testing.T, c *trellis.Client, wf *trellis.Workflow[int, string], role string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for i := range scaleRuns / scaleClients {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			h, err := trellis.Start(ctx, c, wf, i, trellis.StartOptions{ID: fmt.Sprintf("%s-%d", role, i)})
			if err != nil {
				t.Errorf("start %d: %v", i, err)
				return
			}
			if _, err := h.Result(ctx); err != nil {
				t.Errorf("result of %s: %v", h.RunID(), err)
			}
		})
	}
	wg.Wait()
}

func TestPostgresScaleOut(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test skipped in -short mode")
	}
	url := pgtest.SchemaURL(t)
	effects := filepath.Join(t.TempDir(), "effects.log")
	start := func(role string) *testProcess {
		return startTestProcess(t, "TestScaleOutProcess", envScaleRole+"="+role, envScaleStore+"="+url, envScaleEffects+"="+effects)
	}
	// All five open the store at once: one migrates the new schema, the others wait.
	var clients []*testProcess
	for i := range scaleWorkers {
		w := start(fmt.Sprintf("worker-%d", i))
		t.Cleanup(func() { w.kill(t) })
	}
	for i := range scaleClients {
		clients = append(clients, start(fmt.Sprintf("client-%d", i)))
	}
	for i, c := range clients {
		if err := c.cmd.Wait(); err != nil {
			t.Fatalf("client %d: %v", i, err)
		}
	}
	verifyScaleOut(t, url, readScaleEffects(t, effects))
}

// readScaleEffects returns the worker of each execution, per "run/position".
func readScaleEffects(t *testing.T, path string) map[string][]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(line)
		if len(f) != 3 {
			t.Fatalf("malformed effects line %q", line)
		}
		out[f[0]+"/"+f[1]] = append(out[f[0]+"/"+f[1]], f[2])
	}
	return out
}

func verifyScaleOut(t *testing.T, url string, effects map[string][]string) {
	t.Helper()
	ctx := context.Background()
	st, err := trellis.OpenStore(ctx, url, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var runs []*store.Run
	for cursor := ""; ; {
		page, err := st.RunList(ctx, &store.RunListParams{Namespace: "default", Limit: 1000, Cursor: cursor})
		if err != nil {
			t.Fatal(err)
		}
		runs = append(runs, page.Runs...)
		if cursor = page.NextCursor; cursor == "" {
			break
		}
	}
	if len(runs) != scaleRuns {
		t.Fatalf("%d runs in the store, want %d", len(runs), scaleRuns)
	}
	perWorker := map[string]int{}
	for _, r := range runs {
		if r.Status != store.StatusSucceeded || r.Attempts != 1 {
			t.Fatalf("run %s: %s after %d claims, want succeeded after exactly one", r.ID, r.Status, r.Attempts)
		}
		ops, err := st.HistoryList(ctx, &store.HistoryListParams{Namespace: "default", Ref: r.ID})
		if err != nil {
			t.Fatal(err)
		}
		steps := 0
		for i, op := range ops {
			if op.Position != i || !op.Done {
				t.Fatalf("run %s: op %d at position %d done=%v", r.ID, i, op.Position, op.Done)
			}
			if op.Kind != store.OpStep {
				continue
			}
			steps++
			execs := effects[fmt.Sprintf("%s/%d", r.ID, op.Position)]
			if len(execs) != 1 || fmt.Sprintf("%q", execs[0]) != string(op.Result) {
				t.Fatalf("run %s step %d: executed by %v, recorded %s; want one execution, recorded", r.ID, i, execs, op.Result)
			}
			perWorker[execs[0]]++
		}
		if steps != scaleSteps {
			t.Fatalf("run %s recorded %d steps, want %d", r.ID, steps, scaleSteps)
		}
	}
	t.Logf("steps per worker: %v", perWorker)
	for i := range scaleWorkers {
		if n := perWorker[fmt.Sprintf("worker-%d", i)]; n < scaleRuns*scaleSteps/20 {
			t.Errorf("worker-%d executed %d steps, want at least %d: work did not spread", i, n, scaleRuns*scaleSteps/20)
		}
	}
}
