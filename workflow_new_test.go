package main

// New workflow tests (issues 11, 12, 13): PlanMode's inline plan and
// approval, files that are not regular files, TaskManager's projects and
// ids, the skill catalogue following the shell, capped skill expansion and
// SetCallback's defaults.

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestWorkflowPlanModeInlinePlan(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	c := startServer(t, "-state-dir", dir)
	c.initialize("2025-06-18")
	res := wfCall(t, c, "PlanMode", map[string]any{"action": "enter", "goal": "g"}, false, "read-only", `"plan":"..."`)
	planFile := wfStructured(t, res)["plan_file"].(string)
	if msg := wfStructured(t, res)["message"]; msg != resultText(res) {
		t.Errorf("message %q differs from the text %q", msg, resultText(res))
	}
	plan := "# Plan\n1. read\n2. write\n"
	res = wfCall(t, c, "PlanMode", map[string]any{"action": "exit", "plan": plan}, false, "Plan saved to "+planFile, "Returning to execution", plan)
	sc := wfStructured(t, res)
	if sc["plan"] != plan || sc["active"] != false || sc["approval"] != "not asked" || !strings.Contains(sc["message"].(string), "Exiting plan mode") {
		t.Errorf("exit structured: %v", sc)
	}
	if b, _ := os.ReadFile(planFile); string(b) != plan {
		t.Errorf("plan file holds %q", b)
	}
	if left, _ := filepath.Glob(planFile + ".tmp-*"); len(left) > 0 {
		t.Errorf("temp files left: %v", left)
	}
}

func TestWorkflowPlanModeApproval(t *testing.T) {
	t.Parallel()
	c := startServer(t, "-state-dir", t.TempDir())
	uiInitialize(c, "2025-06-18", map[string]any{"elicitation": map[string]any{}})
	uiResult(t, c.waitResponse(uiStartCall(c, "PlanMode", map[string]any{"action": "enter", "goal": "g"})))

	// Keep planning: the note goes back to the model, plan mode stays active.
	id := uiStartCall(c, "PlanMode", map[string]any{"action": "exit", "plan": "step one"})
	req := uiNextRequest(c, "elicitation/create")
	if msg := req["params"].(map[string]any)["message"].(string); !strings.Contains(msg, "step one") || !strings.Contains(req["_line"].(string), `"keep planning"`) {
		t.Fatalf("elicitation: %s", req["_line"])
	}
	uiReply(c, req["id"], map[string]any{"action": "accept", "content": map[string]any{"decision": "keep planning", "note": "add tests"}})
	res := uiResult(t, c.waitResponse(id))
	sc := wfStructured(t, res)
	if isError(res) || sc["active"] != true || sc["approval"] != "keep planning" || sc["note"] != "add tests" ||
		!strings.Contains(sc["message"].(string), "Note from the user: add tests") || !strings.Contains(resultText(res), "stays active") {
		t.Fatalf("keep planning: %v", res)
	}

	// A dismissed form keeps planning too; approve ends plan mode.
	id = uiStartCall(c, "PlanMode", map[string]any{"action": "exit", "plan": "step one, with tests"})
	uiReply(c, uiNextRequest(c, "elicitation/create")["id"], map[string]any{"action": "cancel"})
	if sc := wfStructured(t, uiResult(t, c.waitResponse(id))); sc["active"] != true {
		t.Fatalf("cancel left plan mode: %v", sc)
	}
	id = uiStartCall(c, "PlanMode", map[string]any{"action": "exit", "plan": "step one, with tests"})
	uiReply(c, uiNextRequest(c, "elicitation/create")["id"], map[string]any{"action": "accept", "content": map[string]any{"decision": "approve"}})
	res = uiResult(t, c.waitResponse(id))
	if sc := wfStructured(t, res); sc["active"] != false || sc["approval"] != "approved" || !strings.Contains(resultText(res), "The user approved the plan") {
		t.Fatalf("approve: %v", res)
	}
}

// A plan file that is a FIFO, a device or huge is refused before it is read,
// and nothing hangs: each call's reply arrives within the client's watchdog,
// and stdin EOF still ends telson (startServer's cleanup checks it).
func TestWorkflowPlanModeFileNotRegular(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	c := startServer(t, "-state-dir", dir)
	c.initialize("2025-06-18")
	fifo := filepath.Join(dir, "fifo.md")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	zeroLink := filepath.Join(dir, "zero.md")
	os.Symlink("/dev/zero", zeroLink)
	huge := filepath.Join(dir, "huge.md")
	os.WriteFile(huge, nil, 0o600)
	if err := os.Truncate(huge, 200<<30); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{fifo, "/dev/zero", zeroLink} {
		wfCall(t, c, "PlanMode", map[string]any{"action": "enter", "goal": "g", "plan_file": f}, true, "not a regular file")
	}
	wfCall(t, c, "PlanMode", map[string]any{"action": "enter", "goal": "g", "plan_file": huge}, true, "larger than 1048576 bytes")

	// The file becomes a FIFO after enter: exit refuses it, inline too.
	later := filepath.Join(dir, "later.md")
	wfCall(t, c, "PlanMode", map[string]any{"action": "enter", "goal": "g", "plan_file": later}, false)
	syscall.Mkfifo(later, 0o600)
	wfCall(t, c, "PlanMode", map[string]any{"action": "exit"}, true, "not a regular file")
	wfCall(t, c, "PlanMode", map[string]any{"action": "exit", "plan": "p"}, true, "not a regular file")
	wfCall(t, c, "PlanMode", map[string]any{"action": "status"}, false, "ACTIVE")
	if fi, err := os.Lstat(later); err != nil || fi.Mode()&os.ModeNamedPipe == 0 {
		t.Errorf("the FIFO was replaced: %v %v", fi, err)
	}
}

// wfCd runs cd in the session's shell.
func wfCd(t *testing.T, c *testClient, dir string) {
	t.Helper()
	wfCall(t, c, "Bash", map[string]any{"command": "cd " + dir}, false)
}

// wfProject makes a git project (a folder with .git) and returns it.
func wfProject(t *testing.T) string {
	t.Helper()
	p := t.TempDir()
	if err := os.MkdirAll(filepath.Join(p, ".git"), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestWorkflowTaskManagerProjectsAndIDs(t *testing.T) {
	t.Parallel()
	c := startServer(t, "-state-dir", t.TempDir())
	c.initialize("2025-06-18")
	tm := func(wantErr bool, args map[string]any, want ...string) map[string]any {
		t.Helper()
		return wfCall(t, c, "TaskManager", args, wantErr, want...)
	}
	p1, p2 := wfProject(t), wfProject(t)
	os.MkdirAll(filepath.Join(p1, "src", "deep"), 0o755)
	wfCd(t, c, filepath.Join(p1, "src", "deep"))
	res := tm(false, map[string]any{"action": "create", "text": "A"}, "Created task t1")
	if sc := wfStructured(t, res); sc["project"] != p1 || sc["current"] != "t1" || sc["message"] != resultText(res) {
		t.Fatalf("create structured: %v", sc)
	}
	tm(false, map[string]any{"action": "add", "text": "one"})
	tm(false, map[string]any{"action": "add", "task_id": 1, "text": "two"}, "Added step t1.2")
	tm(false, map[string]any{"action": "add", "task_id": "1", "text": "three"}, "Added step t1.3")

	// Ids as bare numbers, integers or strings; a step in progress.
	tm(false, map[string]any{"action": "complete", "step_id": 1}, "Completed step t1.1", "[1/3]")
	tm(false, map[string]any{"action": "start", "task_id": 1, "step_id": "2"}, "Step t1.2", "in progress")
	res = tm(false, map[string]any{"action": "pending"}, "- t1.2 two (in progress)", "- t1.3 three")
	steps := wfStructured(t, res)["tasks"].([]any)[0].(map[string]any)["steps"].([]any)
	if steps[1].(map[string]any)["in_progress"] != true || steps[0].(map[string]any)["done"] != true {
		t.Fatalf("steps: %v", steps)
	}
	tm(false, map[string]any{"action": "start", "step_id": "t1.3"}, "Step t1.3")
	if text := resultText(tm(false, map[string]any{"action": "pending"})); strings.Count(text, "in progress") != 1 {
		t.Fatalf("two steps in progress: %s", text)
	}
	tm(true, map[string]any{"action": "start"}, "no step")

	// complete without step_id refuses while steps are open.
	tm(true, map[string]any{"action": "complete", "task_id": 1}, "open steps", "- t1.2 two", "- t1.3 three (in progress)", "force")
	tm(false, map[string]any{"action": "list"}, `* t1 "A" [1/3]`)

	// Another project has its own list and current task.
	wfCd(t, c, p2)
	tm(false, map[string]any{"action": "list"}, "No tasks in "+p2)
	tm(true, map[string]any{"action": "add", "text": "x"}, "no current task")
	tm(false, map[string]any{"action": "create", "text": "B"}, "Created task t2")
	if text := resultText(tm(false, map[string]any{"action": "list"})); strings.Contains(text, `"A"`) {
		t.Fatalf("another project's task listed: %s", text)
	}
	res = tm(false, map[string]any{"action": "list", "all": true}, `* t2 "B"`, `t1 "A" [1/3] in `+p1)
	if n := len(wfStructured(t, res)["tasks"].([]any)); n != 2 {
		t.Fatalf("all: %d tasks", n)
	}
	wfCd(t, c, p1)
	tm(false, map[string]any{"action": "list"}, `* t1 "A"`)
	tm(false, map[string]any{"action": "complete", "force": true}, "Completed task t1", "[3/3]")
}

// tasks.json must be a regular file read through a cap; a symlink is written through.
func TestWorkflowTaskManagerFileNotRegular(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "tasks.json")
	c := startServer(t, "-state-dir", dir)
	c.initialize("2025-06-18")
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Fatal(err)
	}
	wfCall(t, c, "TaskManager", map[string]any{"action": "list"}, true, "not a regular file", "left untouched")
	wfCall(t, c, "TaskManager", map[string]any{"action": "create", "text": "x"}, true, "not a regular file")
	os.Remove(path)

	os.Symlink("/dev/zero", path)
	wfCall(t, c, "TaskManager", map[string]any{"action": "create", "text": "x"}, true, "not a regular file")
	if target, err := os.Readlink(path); err != nil || target != "/dev/zero" {
		t.Fatalf("link replaced: %q %v", target, err)
	}
	os.Remove(path)

	// A dangling link is not replaced by a file.
	os.Symlink(filepath.Join(dir, "nowhere", "tasks.json"), path)
	wfCall(t, c, "TaskManager", map[string]any{"action": "create", "text": "x"}, true, "not a regular file")
	if fi, err := os.Lstat(path); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Fatalf("dangling link replaced: %v %v", fi, err)
	}
	os.Remove(path)

	// A link to a real file is followed and written through.
	real := filepath.Join(t.TempDir(), "real-tasks.json")
	os.WriteFile(real, []byte(`{"tasks":[]}`), 0o600)
	os.Symlink(real, path)
	wfCall(t, c, "TaskManager", map[string]any{"action": "create", "text": "through the link"}, false, "Created task t1")
	if fi, err := os.Lstat(path); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Fatalf("link replaced: %v %v", fi, err)
	}
	if b, _ := os.ReadFile(real); !bytes.Contains(b, []byte("through the link")) {
		t.Fatalf("target holds %s", b)
	}
}

// Not parallel: it sets HOME.
func TestWorkflowSkillsFollowTheShell(t *testing.T) {
	t.Setenv("HOME", t.TempDir())
	proj := wfProject(t)
	wfSkill(t, filepath.Join(proj, ".claude", "skills"), "deploy", "---\ndescription: Deploy it.\n---\nGo.\n")
	c := startServer(t, "-state-dir", t.TempDir())
	c.initialize("2025-06-18")
	prompts := func() string {
		b, _ := json.Marshal(c.request("prompts/list", nil)["result"])
		return string(b)
	}
	if p := prompts(); strings.Contains(p, "deploy") {
		t.Fatalf("deploy listed before the cd: %s", p)
	}
	wfNotes(c, "notifications/tools/list_changed")
	wfCd(t, c, filepath.Join(proj))
	if p := prompts(); !strings.Contains(p, `"name":"deploy"`) {
		t.Fatalf("deploy not listed after the cd: %s", p)
	}
	if n := len(wfNotes(c, "notifications/tools/list_changed")); n != 1 {
		t.Fatalf("%d tools/list_changed after the cd, want 1", n)
	}
	b, _ := json.Marshal(c.request("tools/list", nil)["result"])
	if !strings.Contains(string(b), "- deploy: Deploy it.") {
		t.Fatalf("InvokeSkill's description does not follow the shell: %s", b)
	}
}

// A SKILL.md that is a FIFO or a sparse 200 GB file costs nothing at
// start-up or in `telson tools`; a skill folder that is a symlink works.
// Not parallel: it sets HOME.
func TestWorkflowSkillFilesNotRegular(t *testing.T) {
	t.Setenv("HOME", t.TempDir())
	extra := t.TempDir()
	wfSkill(t, extra, "ok", "---\ndescription: fine\n---\nx\n")
	os.MkdirAll(filepath.Join(extra, "fifo"), 0o755)
	syscall.Mkfifo(filepath.Join(extra, "fifo", "SKILL.md"), 0o600)
	huge := wfSkill(t, extra, "huge", "---\ndescription: big\n---\n")
	if err := os.Truncate(huge, 200<<30); err != nil {
		t.Fatal(err)
	}
	elsewhere := t.TempDir()
	wfSkill(t, elsewhere, "linked", "---\ndescription: through a link\n---\nx\n")
	os.Symlink(filepath.Join(elsewhere, "linked"), filepath.Join(extra, "linked"))

	done := make(chan string, 1)
	go func() { // exits when run returns
		var out bytes.Buffer
		run(context.Background(), strings.NewReader(""), &out, &out, []string{"-additional-skills", extra, "tools"})
		done <- out.String()
	}()
	select {
	case out := <-done:
		if !strings.Contains(out, "InvokeSkill") || !strings.Contains(out, "huge/SKILL.md: read") || !strings.Contains(out, "larger than 262144 bytes") {
			t.Errorf("telson tools:\n%s", out)
		}
	case <-time.After(watchdog):
		t.Fatal("telson tools did not finish")
	}
	c := startServer(t, "-state-dir", t.TempDir(), "-additional-skills", extra)
	c.initialize("2025-06-18")
	b, _ := json.Marshal(c.request("tools/list", nil)["result"])
	if !strings.Contains(string(b), "- linked: through a link\\n- ok: fine") || strings.Contains(string(b), "- huge") {
		t.Errorf("skills listed: %s", b)
	}
	wfCall(t, c, "InvokeSkill", map[string]any{"skill_name": "linked"}, false, "[skill: linked | Additional Skill")
	wfCall(t, c, "InvokeSkill", map[string]any{"skill_name": "huge"}, true, "not found")
}

// $ARGUMENTS expansion is capped: a 230 KB skill of placeholders with
// 20,000-character arguments is refused without allocating much.
// Not parallel: it measures the process's allocations, and sets HOME.
func TestWorkflowSkillArgumentsCapped(t *testing.T) {
	t.Setenv("HOME", t.TempDir())
	extra := t.TempDir()
	wfSkill(t, extra, "bomb", "---\ndescription: placeholders\n---\n"+strings.Repeat("$ARGUMENTS", 23000))
	c := startServer(t, "-state-dir", t.TempDir(), "-additional-skills", extra)
	c.initialize("2025-06-18")
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for _, n := range []int{20000, 9000, 10} {
		resp := c.request("prompts/get", map[string]any{"name": "bomb", "arguments": map[string]any{"arguments": strings.Repeat("x", n)}})
		if e, _ := resp["error"].(map[string]any); e == nil || !strings.Contains(e["message"].(string), "longer than 10000") && !strings.Contains(e["message"].(string), "larger than 262144") {
			t.Errorf("%d characters: %.200v", n, resp)
		}
	}
	wfCall(t, c, "InvokeSkill", map[string]any{"skill_name": "bomb", "arguments": strings.Repeat("x", 20000)}, true, "at most 10000")
	wfCall(t, c, "InvokeSkill", map[string]any{"skill_name": "bomb", "arguments": strings.Repeat("x", 9000)}, true, "larger than 262144")
	runtime.ReadMemStats(&after)
	if grown := after.TotalAlloc - before.TotalAlloc; grown > 64<<20 {
		t.Errorf("the refused expansions allocated %d MB", grown>>20)
	}
}

func TestWorkflowCallbackDefaultsOnce(t *testing.T) {
	t.Parallel()
	c, _, clk := wfStart(t, map[string]string{"STATE_DIR": t.TempDir()})
	c.initialize("2025-06-18")
	wfCall(t, c, "SetCallback", map[string]any{"message": "look", "delay_seconds": 5}, false, "slot 0: fires once in 5s.")
	clk.advance(5 * time.Second)
	clk.advance(5 * time.Second)
	if text := resultText(wfCall(t, c, "SetCallback", map[string]any{"action": "list"}, false, "No active callbacks.")); strings.Count(text, "[callback 0] look") != 1 {
		t.Fatalf("default repeat: %s", text)
	}
	wfCall(t, c, "SetCallback", map[string]any{"message": "a", "delay_seconds": 5, "repeat_count": 2}, false, "fires every 5s, 2 times.")
	wfCall(t, c, "SetCallback", map[string]any{"action": "cancel"}, false, "Cancelled 1 callback.")
	wfCall(t, c, "SetCallback", map[string]any{"action": "cancel"}, false, "Cancelled 0 callbacks.")
}

// In the 2026-07-28 era the approval form comes back as an input-required
// result, and the retried call carries the answer.
func TestWorkflowPlanModeApprovalModern(t *testing.T) {
	t.Parallel()
	c := startServer(t, "-state-dir", t.TempDir())
	call := func(args map[string]any, extra map[string]any) map[string]any {
		t.Helper()
		p := map[string]any{"name": "PlanMode", "arguments": args, "_meta": map[string]any{
			"io.modelcontextprotocol/protocolVersion":    "2026-07-28",
			"io.modelcontextprotocol/clientCapabilities": map[string]any{"elicitation": map[string]any{}}}}
		for k, v := range extra {
			p[k] = v
		}
		return uiResult(t, c.request("tools/call", p))
	}
	call(map[string]any{"action": "enter", "goal": "g"}, nil)
	exit := map[string]any{"action": "exit", "plan": "the plan"}
	first := call(exit, nil)
	ask, _ := first["inputRequests"].(map[string]any)["approve"].(map[string]any)
	if first["resultType"] != "input_required" || ask["method"] != "elicitation/create" ||
		!strings.Contains(ask["params"].(map[string]any)["message"].(string), "the plan") {
		t.Fatalf("first: %v", first)
	}
	answer := func(decision string) map[string]any {
		return map[string]any{"requestState": first["requestState"], "inputResponses": map[string]any{
			"approve": map[string]any{"action": "accept", "content": map[string]any{"decision": decision}}}}
	}
	if sc := wfStructured(t, call(exit, answer("keep planning"))); sc["active"] != true || sc["approval"] != "keep planning" {
		t.Fatalf("keep planning: %v", sc)
	}
	if sc := wfStructured(t, call(exit, answer("approve"))); sc["active"] != false || sc["approval"] != "approved" {
		t.Fatalf("approve: %v", sc)
	}
}
