package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// decodeArgs decodes a tool call's arguments as tools/call does: numbers stay json.Number.
func decodeArgs(t *testing.T, in string) any {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(in))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("%s: %v", in, err)
	}
	return v
}
