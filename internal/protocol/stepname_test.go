package protocol

import (
	"encoding/json"
	"testing"
)

func TestStepName(t *testing.T) {
	for data, want := range map[string]string{
		`{"name":"a"}`: "a",
		` {"attempt":2,"x":[1,{"name":"no"}],"name":"b","duration_ms":3} `: "b",
		`{"Name":"c"}`:               "c",
		`{"NAME":"c","name":"d"}`:    "d",
		`{"name":"d","Name":"c"}`:    "d",
		`{"name":1}`:                 "",
		`{"Name":1,"nAme":"e"}`:      "e",
		`{}`:                         "",
		`{"x":{"name":"inner"}}`:     "",
		`[{"name":"a"}]`:             "",
		`"name"`:                     "",
		`{"name":"caf\u00e9 \"q\""}`: "café \"q\"",
	} {
		if got := stepName([]byte(data)); got != want {
			t.Errorf("stepName(%s) = %q, want %q", data, got, want)
		}
	}
}

// BenchmarkStepName reads a step event's name as the server reads every one
// a worker sends; the Unmarshal it replaced is beside it.
func BenchmarkStepName(b *testing.B) {
	data := []byte(`{"name":"charge-card","attempt":1,"duration_ms":12}`)
	b.Run("stepName", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if stepName(data) != "charge-card" {
				b.Fatal("no name")
			}
		}
	})
	b.Run("Unmarshal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var v struct {
				Name string `json:"name"`
			}
			if json.Unmarshal(data, &v) != nil || v.Name != "charge-card" {
				b.Fatal("no name")
			}
		}
	})
}
