package main

import "testing"

func TestSmokeInitializeAndBash(t *testing.T) {
	c := startServer(t)
	resp := c.initialize("2025-06-18")
	if resp["result"].(map[string]any)["protocolVersion"] != "2025-06-18" {
		t.Fatalf("initialize: %v", resp)
	}
	res := c.callTool("Bash", map[string]any{"command": "echo hello"})
	if resultText(res) != "hello\n" {
		t.Errorf("Bash: got %q", resultText(res))
	}
}

func TestSmokeBinary(t *testing.T) {
	c := startBinary(t, nil)
	c.initialize("2025-11-25")
	res := c.callTool("Bash", map[string]any{"command": "echo hi"})
	if resultText(res) != "hi\n" {
		t.Errorf("got %q", resultText(res))
	}
}
