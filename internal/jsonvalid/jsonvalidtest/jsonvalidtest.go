// Package jsonvalidtest holds oracles for the tests and fuzz targets of code
// that must refuse what jsonvalid.Check refuses: they answer the same
// questions with encoding/json, an implementation independent of Check's.
package jsonvalidtest

import (
	"bytes"
	"encoding/json"
	"regexp"
	"unicode/utf8"
)

// Refused reports whether b is something jsonvalid.Check must refuse by what
// encoding/json can tell: not one JSON value, not UTF-8, or a name twice in
// one object. (Check also refuses escapes of lone surrogates, which
// encoding/json takes as U+FFFD: see SurrogateEscape.)
func Refused(b []byte) bool {
	return !json.Valid(b) || !utf8.Valid(b) || DuplicateName(b)
}

// SurrogateEscape matches an escape of a UTF-16 surrogate ("\ud800"), which
// Check accepts only as half of a pair and encoding/json always.
var SurrogateEscape = regexp.MustCompile(`\\[uU][dD][89a-fA-F]`)

// DuplicateName reports whether JSON b holds an object with a name twice, the
// names compared after unescaping, by encoding/json's tokenizer; false when b
// is not valid JSON before a duplicate is found.
func DuplicateName(b []byte) bool {
	dec := json.NewDecoder(bytes.NewReader(b))
	type frame struct {
		names  map[string]bool // nil in an array
		onName bool            // the next token of the object is a name
	}
	var stack []*frame
	for {
		tok, err := dec.Token()
		if err != nil {
			return false
		}
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		if top != nil && top.onName {
			name, ok := tok.(string)
			if !ok { // the object's '}'
				stack = stack[:len(stack)-1]
				continue
			}
			if top.names[name] {
				return true
			}
			top.names[name], top.onName = true, false
			continue
		}
		if top != nil && top.names != nil {
			top.onName = true // tok is the value of a name: a name comes next
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, &frame{names: map[string]bool{}, onName: true})
		case json.Delim('['):
			stack = append(stack, &frame{})
		case json.Delim(']'):
			stack = stack[:len(stack)-1]
		}
	}
}
