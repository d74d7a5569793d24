package main

// trim_new_test.go: tests added by the trim pass (issue 14) on
// AskUserQuestion, whose 2025-06-18 checkbox form was cut.

import (
	"strings"
	"testing"
)

// An accepted form with nothing picked says so rather than giving an empty answer.
func TestAskUserQuestionNothingPicked(t *testing.T) {
	t.Parallel()
	c := startServer(t)
	uiInitialize(c, "2025-11-25", map[string]any{"elicitation": map[string]any{}})
	id := uiStartCall(c, "AskUserQuestion", map[string]any{"questions_json": uiClaudeQuestions})
	req := uiNextRequest(c, "elicitation/create")
	uiReply(c, req["id"], map[string]any{"action": "accept", "content": map[string]any{}})
	res := uiResult(t, c.waitResponse(id))
	if !strings.Contains(resultText(res), `"Which database?"="(no answer)", "Which extras?"="(none selected)"`) {
		t.Errorf("got %q", resultText(res))
	}
}
