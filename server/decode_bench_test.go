package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/trellis-dev/trellis/internal/jsonvalid"
)

// BenchmarkDecodeStartBody: what jsonvalid.Check adds to the decoding of a start
// body, on every start of `trellis bench --server`. "stdlib" is the decoding
// before the check (a json.Decoder on the body, then a check for trailing
// data); "checked" is decodeJSON (the body read whole, jsonvalid.Check, then
// decoded); "check" is jsonvalid.Check alone.
func BenchmarkDecodeStartBody(b *testing.B) {
	bodies := map[string][]byte{
		"bench": []byte(`{"workflow":"bench","input":{"n":1}}`),
		"1KiB": []byte(`{"workflow":"charge","id":"order-4711","queue":"payments","priority":2,"input":{"order":4711,"customer":{"name":"Ada Lovelace","email":"ada@example.com"},"lines":[` +
			strings.Repeat(`{"sku":"SKU-000123","qty":2,"price":"19.90","note":"gift wrap, été"},`, 12) + `{"sku":"x","qty":1}]}}`),
	}
	for name, body := range bodies {
		b.Run(name+"/stdlib", func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				var req StartRequest
				if err := decodeStdlib(bytes.NewReader(body), &req); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(name+"/checked", func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				var req StartRequest
				data, err := readBody(bytes.NewReader(body), 1<<20, int64(len(body)))
				if err != nil {
					b.Fatal(err)
				}
				if err := decodeBytes(data, false, &req); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(name+"/check", func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				if err := jsonvalid.Check(body); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// decodeStdlib is decodeJSON as it was before jsonvalid.Check, for comparison.
func decodeStdlib(body io.Reader, v any) error {
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("data after the value")
	}
	return nil
}
