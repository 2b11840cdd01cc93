package proto

import (
	"os"
	"regexp"
	"slices"
	"testing"

	workerv1 "github.com/trellis-dev/trellis/internal/gen/trellis/worker/v1"
)

// The committed Go code matches the .proto file: every message, field and
// procedure declared in it is in the generated descriptor and back. (A change
// to the .proto without `make proto` fails here.)
func TestGeneratedCodeIsCurrent(t *testing.T) {
	src, err := os.ReadFile("trellis/worker/v1/worker.proto")
	if err != nil {
		t.Fatal(err)
	}
	fd := workerv1.File_trellis_worker_v1_worker_proto
	var declared, generated []string
	for _, m := range regexp.MustCompile(`(?m)^message (\w+)`).FindAllSubmatch(src, -1) {
		declared = append(declared, "message "+string(m[1]))
	}
	for _, m := range regexp.MustCompile(`(?m)^\s+rpc (\w+)\(`).FindAllSubmatch(src, -1) {
		declared = append(declared, "rpc "+string(m[1]))
	}
	fields := len(regexp.MustCompile(`(?m)^\s+(?:optional |repeated )?[\w.]+ \w+ = \d+;`).FindAll(src, -1))
	msgs := fd.Messages()
	n := 0
	for i := range msgs.Len() {
		generated = append(generated, "message "+string(msgs.Get(i).Name()))
		n += msgs.Get(i).Fields().Len()
	}
	methods := fd.Services().ByName("WorkerService").Methods()
	for i := range methods.Len() {
		generated = append(generated, "rpc "+string(methods.Get(i).Name()))
	}
	slices.Sort(declared)
	slices.Sort(generated)
	if !slices.Equal(declared, generated) {
		t.Errorf("worker.proto declares %v,\nthe generated code has %v: run make proto", declared, generated)
	}
	if fields != n {
		t.Errorf("worker.proto declares %d fields, the generated code has %d: run make proto", fields, n)
	}
}
