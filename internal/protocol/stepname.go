package protocol

import (
	"bytes"
	"strings"
	"sync"

	"github.com/go-json-experiment/json/jsontext"
)

// stepName returns the string member "name" of the JSON object d (valid
// JSON), or "" when it has none or it is not a string; with no member named
// exactly "name", the first whose name is "name" but for case (the rule used
// to be encoding/json's Unmarshal, which matches names so). Every step event of every
// checkpoint is read here; a decoder from a pool reads the object's members one
// by one and stops at "name", with no allocation but the name returned (an
// Unmarshal took 4% of a server's CPU under w1).
func stepName(d []byte) string {
	sd := stepDecoders.Get().(*stepDecoder)
	defer stepDecoders.Put(sd)
	sd.r.Reset(d)
	sd.dec.Reset(&sd.r)
	defer sd.r.Reset(nil)
	if tok, err := sd.dec.ReadToken(); err != nil || tok.Kind() != '{' {
		return ""
	}
	folded := ""
	for sd.dec.PeekKind() == '"' {
		key, err := sd.dec.ReadValue()
		if err != nil {
			return folded
		}
		exact := bytes.Equal(key, []byte(`"name"`))
		fold := !exact && folded == "" && len(key) == len(`"name"`) && strings.EqualFold(string(key), `"name"`)
		if !exact && !fold {
			if err := sd.dec.SkipValue(); err != nil {
				return folded
			}
			continue
		}
		v, err := sd.dec.ReadToken()
		if err != nil {
			return folded
		}
		if v.Kind() != '"' {
			if exact {
				return ""
			}
			continue
		}
		if exact {
			return v.String()
		}
		folded = v.String()
	}
	return folded
}

type stepDecoder struct {
	r   bytes.Reader
	dec jsontext.Decoder
}

var stepDecoders = sync.Pool{New: func() any { return new(stepDecoder) }}
