package main

import (
	"strings"
	"testing"
)

// TestArgumentsNormalized: unknown arguments are ignored, lossless conversions
// reach the handler converted, and what does not convert still fails naming the field.
func TestArgumentsNormalized(t *testing.T) {
	t.Parallel()
	schema, err := parseSchema(`{"type":"object","required":["n"],"properties":{
		"n":{"type":"integer","minimum":1,"maximum":9000},"f":{"type":"number"},"s":{"type":"string"},
		"b":{"type":"boolean"},"list":{"type":"array","items":{"type":"object","properties":{"id":{"type":"string"}}}},
		"mode":{"type":"string","enum":["a","b"]}}}`)
	if err != nil {
		t.Fatal(err)
	}
	ok := map[string]string{
		`{"n":"5000"}`:                                  `{"n":5000}`,
		`{"n":5,"f":"2.5","s":7,"b":"false"}`:           `{"b":false,"f":2.5,"n":5,"s":"7"}`,
		`{"n":1,"wait_for_previous":true,"x":{"y":1}}`:  `{"n":1}`,
		`{"n":1,"list":[{"id":3,"extra":1}],"s":"-12"}`: `{"list":[{"id":"3"}],"n":1,"s":"-12"}`,
		`{"n":1,"s":-40}`:                               `{"n":1,"s":"-40"}`,
	}
	for in, want := range ok {
		got, problem := schema.check([]byte(in))
		if problem != "" || string(got) != want {
			t.Errorf("%s: got %s %q, want %s", in, got, problem, want)
		}
	}
	bad := map[string]string{
		`{}`:                           `"n" is required`,
		`{"n":"five"}`:                 `"n" must be an integer, got a string`,
		`{"n":"5.5"}`:                  `"n" must be an integer, got 5.5`,
		`{"n":"9001"}`:                 `"n" must be at most 9000`,
		`{"n":1,"s":1.5}`:              `"s" must be a string, got a number (1.5)`,
		`{"n":1,"s":1e3}`:              `"s" must be a string`,
		`{"n":1,"b":"yes"}`:            `"b" must be a boolean, got a string`,
		`{"n":1,"f":"0x10"}`:           `"f" must be a number, got a string`,
		`{"n":1,"mode":"c"}`:           `"mode" must be one of a, b`,
		`{"n":1,"list":[{"id":true}]}`: `"id" must be a string, got a boolean`,
	}
	for in, want := range bad {
		if _, problem := schema.check([]byte(in)); !strings.Contains(problem, want) {
			t.Errorf("%s: got %q, want %q", in, problem, want)
		}
	}
}

// TestToolCallExtraArguments: a real call with arguments telson does not know,
// and a timeout written as a string, succeeds.
func TestToolCallExtraArguments(t *testing.T) {
	t.Parallel()
	c := startServer(t)
	c.initialize("2025-11-25")
	res := c.callTool("Bash", map[string]any{"command": "echo ok", "timeout": "5000",
		"description": "say ok", "wait_for_previous": true})
	if isError(res) || resultText(res) != "ok\n" {
		t.Errorf("got %v", res)
	}
	res = c.callTool("Bash", map[string]any{"command": "echo ok", "timeout": "soon"})
	if !isError(res) || !strings.Contains(resultText(res), `"timeout" must be an integer`) {
		t.Errorf("got %v", res)
	}
}
