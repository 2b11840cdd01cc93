package server

import (
	"encoding/json"
	"sort"
	"testing"
)

// Every record of the API has its own schema in the document.
func TestOpenAPISchemas(t *testing.T) {
	doc := OpenAPI()
	schemas := doc["components"].(map[string]any)["schemas"].(map[string]any)
	var names []string
	for n := range schemas {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, want := range []string{"Run", "RunPage", "HistoryOp", "Attempt", "ErrorInfo", "ApprovalRecord", "ApprovalList",
		"WorkerRecord", "StartRequest", "EventRequest", "DecideRequest", "ResetRequest", "Problem", "RecordedHistory", "Value"} {
		if schemas[want] == nil {
			t.Errorf("no schema %s (have %v)", want, names)
		}
	}
	if _, err := json.Marshal(doc); err != nil {
		t.Fatal(err)
	}
}
