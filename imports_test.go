package trellis_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
)

// linkedOnlyOnImport are the packages (by prefix) that a program gets only by
// importing the package that registers them: the Postgres driver, the remote
// worker's transport, and the OTLP exporters with gRPC.
var linkedOnlyOnImport = []string{
	"github.com/jackc/pgx",
	"google.golang.org/grpc",
	"connectrpc.com/connect",
	"go.opentelemetry.io/otel/exporters/otlp",
	"github.com/trellis-dev/trellis/store/storepg",
	"github.com/trellis-dev/trellis/store/storeremote",
	"github.com/trellis-dev/trellis/otlp",
}

// A program that imports package trellis alone (testdata/minimal) links the
// SQLite driver and none of the above, with either SQLite library; it runs a
// workflow in a SQLite store, and a Postgres store URL, a remote worker and an
// OTLP export each fail with an error that names the import they need.
func TestMinimalProgramLinksNoDriverItDoesNotUse(t *testing.T) {
	goBin, err := exec.LookPath("go") // go test puts its own go first in PATH
	if err != nil {
		t.Fatalf("the go command: %v", err)
	}
	for _, tags := range []string{"", "trellis_cgo"} {
		out, err := exec.Command(goBin, "list", "-deps", "-tags="+tags, "./testdata/minimal").Output()
		if err != nil {
			t.Fatalf("go list -deps -tags=%q: %v", tags, err)
		}
		deps := strings.Fields(string(out))
		var sqlite bool
		for _, dep := range deps {
			sqlite = sqlite || dep == "github.com/trellis-dev/trellis/store/storesqlite"
			for _, banned := range linkedOnlyOnImport {
				if dep == banned || strings.HasPrefix(dep, banned+"/") {
					t.Errorf("tags %q: the minimal program links %s", tags, dep)
				}
			}
		}
		if !sqlite {
			t.Errorf("tags %q: the minimal program does not link store/storesqlite (%d packages)", tags, len(deps))
		}
		t.Logf("tags %q: the minimal program links %d packages", tags, len(deps))
	}

	bin := filepath.Join(t.TempDir(), "minimal")
	// Built as this test binary is (its tags, -race), from the build cache.
	build := []string{"build", "-o", bin}
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, s := range info.Settings {
			switch {
			case s.Key == "-tags" && s.Value != "":
				build = append(build, "-tags="+s.Value)
			case s.Key == "-race" && s.Value == "true":
				build = append(build, "-race")
			}
		}
	}
	if out, err := exec.Command(goBin, append(build, "./testdata/minimal")...).CombinedOutput(); err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(build, " "), err, out)
	}
	if fi, err := os.Stat(bin); err == nil {
		t.Logf("the minimal program (go %s): %.1f MB", strings.Join(build[:1], " ")+" "+strings.Join(build[3:], " "), float64(fi.Size())/1e6)
	}

	run := func(env []string, args ...string) (stdout, stderr string, code int) {
		t.Helper()
		cmd := exec.Command(bin, args...)
		cmd.Dir = t.TempDir()
		for _, kv := range os.Environ() {
			if !strings.HasPrefix(kv, "OTEL_") {
				cmd.Env = append(cmd.Env, kv)
			}
		}
		cmd.Env = append(cmd.Env, env...)
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		if err := cmd.Run(); err != nil {
			if _, exited := err.(*exec.ExitError); !exited {
				t.Fatalf("minimal %v: %v", args, err)
			}
		}
		return out.String(), errOut.String(), cmd.ProcessState.ExitCode()
	}
	if out, errOut, code := run(nil, "run", "sqlite:t.db"); code != 0 || out != "hello, TRELLIS\n" {
		t.Errorf("minimal run sqlite:t.db: exit %d, stdout %q, stderr %q; want hello, TRELLIS", code, out, errOut)
	}
	for _, c := range []struct {
		env  []string
		args []string
		want string
	}{
		{nil, []string{"run", "postgres://127.0.0.1:5432/test"},
			`no store driver for "postgres://": import _ "github.com/trellis-dev/trellis/store/storepg"`},
		{nil, []string{"worker", "http://127.0.0.1:7070"},
			`trellis worker: no worker transport for Config.Server "http://127.0.0.1:7070": import _ "github.com/trellis-dev/trellis/store/storeremote"`},
		{[]string{"OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318"}, []string{"trace"},
			`tracing: no OTLP exporter for http/protobuf: import _ "github.com/trellis-dev/trellis/otlp"`},
		{[]string{"OTEL_TRACES_EXPORTER=otlp", "OTEL_EXPORTER_OTLP_PROTOCOL=grpc"}, []string{"trace"},
			`tracing: no OTLP exporter for grpc: import _ "github.com/trellis-dev/trellis/otlp"`},
	} {
		if out, errOut, code := run(c.env, c.args...); code != 1 || out != "" || !strings.Contains(errOut, c.want) {
			t.Errorf("minimal %v (env %v): exit %d, stdout %q, stderr %q; want exit 1 and %s", c.args, c.env, code, out, errOut, c.want)
		}
	}
}
