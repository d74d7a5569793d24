// workflow_test.go tests TaskManager, PlanMode, InvokeSkill (and skills as
// prompts) and SetCallback the way a client sees them. Callback timers run
// on wfClock, a clock the test advances; nothing sleeps.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// wfClock is a fake clock for callback timers: advance fires what is due.
type wfClock struct {
	mu     sync.Mutex // guards now and timers
	now    time.Time
	timers []*wfTimer
}

type wfTimer struct {
	c    *wfClock
	at   time.Time
	f    func()
	done bool
}

func (t *wfTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	was := !t.done
	t.done = true
	return was
}

func (c *wfClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *wfClock) afterFunc(d time.Duration, f func()) stopper {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &wfTimer{c: c, at: c.now.Add(d), f: f}
	c.timers = append(c.timers, t)
	return t
}

// advance moves the clock by d and runs the timers that came due, in order.
func (c *wfClock) advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	var due []*wfTimer
	for _, t := range c.timers {
		if !t.done && !t.at.After(c.now) {
			t.done = true
			due = append(due, t)
		}
	}
	c.mu.Unlock()
	sort.SliceStable(due, func(i, j int) bool { return due[i].at.Before(due[j].at) })
	for _, t := range due {
		t.f()
	}
}

// armed counts timers not yet fired or stopped.
func (c *wfClock) armed() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, t := range c.timers {
		if !t.done {
			n++
		}
	}
	return n
}

// wfStart serves one in-process session like serveStdio does, but hands the
// test the session so its callback clock can be replaced.
func wfStart(t *testing.T, flags map[string]string) (*testClient, *session, *wfClock) {
	t.Helper()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	c := &testClient{t: t, in: inW, lines: make(chan []byte, 1024), done: make(chan error, 1), stderr: &syncBuffer{}}
	srv := newServer(loadConfig(flags), c.stderr)
	s := newSession(srv, outW)
	clk := &wfClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	s.workflow.callbacks.afterFunc, s.workflow.callbacks.now = clk.afterFunc, clk.Now
	go func() { // exits at stdin EOF, once the session is shut down
		err := s.serve(context.Background(), inR)
		s.wait()
		s.stopWorkflow()
		srv.close()
		outW.Close()
		c.done <- err
	}()
	go c.readLines(outR)
	t.Cleanup(func() {
		c.in.Close()
		select {
		case <-c.done:
		case <-time.After(watchdog):
			t.Errorf("session did not stop")
		}
	})
	return c, s, clk
}

// wfCall calls a tool and checks whether it failed as expected and that its text holds want.
func wfCall(t *testing.T, c *testClient, name string, args map[string]any, wantErr bool, want ...string) map[string]any {
	t.Helper()
	res := c.callTool(name, args)
	text := resultText(res)
	if isError(res) != wantErr {
		t.Fatalf("%s %v: isError=%v, want %v: %s", name, args, isError(res), wantErr, text)
	}
	for _, w := range want {
		if !strings.Contains(text, w) {
			t.Fatalf("%s %v: text lacks %q:\n%s", name, args, w, text)
		}
	}
	return res
}

func wfStructured(t *testing.T, res map[string]any) map[string]any {
	t.Helper()
	sc, ok := res["structuredContent"].(map[string]any)
	if !ok {
		t.Fatalf("no structuredContent: %v", res)
	}
	return sc
}

// wfNotes returns and forgets the notifications with method seen so far.
func wfNotes(c *testClient, method string) []map[string]any {
	c.mu.Lock()
	defer c.mu.Unlock()
	var got, rest []map[string]any
	for _, n := range c.notes {
		if n["method"] == method {
			got = append(got, n)
		} else {
			rest = append(rest, n)
		}
	}
	c.notes = rest
	return got
}

func TestWorkflowTaskManagerRoundTrip(t *testing.T) {
	t.Parallel()
	c := startServer(t, "-state-dir", t.TempDir())
	c.initialize("2025-06-18")
	tm := func(wantErr bool, args map[string]any, want ...string) map[string]any {
		t.Helper()
		return wfCall(t, c, "TaskManager", args, wantErr, want...)
	}
	tm(false, map[string]any{"action": "list"}, "No tasks yet")
	res := tm(false, map[string]any{"action": "create", "text": "Ship v2"}, `Created task t1 "Ship v2"`, "current task")
	if sc := wfStructured(t, res); sc["current"] != "t1" || len(sc["tasks"].([]any)) != 1 {
		t.Fatalf("create structured: %v", sc)
	}
	tm(false, map[string]any{"action": "add", "text": "write tests"}, "Added step t1.1", "[0/1]")
	tm(false, map[string]any{"action": "add", "text": "write docs"}, "Added step t1.2", "[0/2]")
	tm(false, map[string]any{"action": "create", "text": "Fix login"}, "Created task t2")
	tm(false, map[string]any{"action": "add", "task_id": "t1", "text": "tag release"}, "Added step t1.3 to task t1")
	tm(false, map[string]any{"action": "add", "text": "reproduce"}, "Added step t2.1 to task t2")
	tm(false, map[string]any{"action": "complete", "step_id": "t1.2"}, "Completed step t1.2", "[1/3]")
	tm(false, map[string]any{"action": "complete", "step_id": "t1.2"}, "already completed")
	res = tm(false, map[string]any{"action": "list"}, "* t2 \"Fix login\" [0/1]", "  t1 \"Ship v2\" [1/3]")
	if sc := wfStructured(t, res); sc["current"] != "t2" || len(sc["tasks"].([]any)) != 2 {
		t.Fatalf("list structured: %v", sc)
	}
	tm(false, map[string]any{"action": "list", "query": "DOCS"}, "t1 \"Ship v2\"")
	if text := resultText(tm(false, map[string]any{"action": "list", "query": "docs"})); strings.Contains(text, "t2") {
		t.Fatalf("query did not filter: %s", text)
	}
	res = tm(false, map[string]any{"action": "pending", "task_id": "t1"}, "- t1.1 write tests", "- t1.3 tag release")
	steps := wfStructured(t, res)["tasks"].([]any)[0].(map[string]any)["steps"].([]any)
	if len(steps) != 2 {
		t.Fatalf("pending structured steps: %v", steps)
	}
	if text := resultText(tm(false, map[string]any{"action": "pending", "task_id": "t1", "query": "tag"})); strings.Contains(text, "t1.1") {
		t.Fatalf("pending query did not filter: %s", text)
	}
	tm(false, map[string]any{"action": "switch", "task_id": "t1"}, "Switched to task t1")
	tm(false, map[string]any{"action": "complete", "step_id": "1"}, "Completed step t1.1", "[2/3]")
	tm(false, map[string]any{"action": "complete"}, "Completed task t1", "no current task")
	tm(false, map[string]any{"action": "complete", "task_id": "t1"}, "already completed")
	tm(false, map[string]any{"action": "pending", "task_id": "t1"}, "No open steps")
	tm(false, map[string]any{"action": "list"}, "t1 \"Ship v2\" [3/3] done")
	tm(false, map[string]any{"action": "add", "task_id": "t1", "text": "hotfix"}, "Added step t1.4", "[3/4]")

	// Bad input, parameter by parameter.
	tm(true, map[string]any{}, `"action" is required`)
	tm(true, map[string]any{"action": "delete"}, "must be one of")
	tm(true, map[string]any{"action": "create"}, "create needs text")
	tm(true, map[string]any{"action": "create", "text": "   "}, "create needs text")
	tm(true, map[string]any{"action": "create", "text": strings.Repeat("x", 501)}, "at most 500")
	tm(true, map[string]any{"action": "add", "text": "x"}, "no current task")
	tm(true, map[string]any{"action": "add", "task_id": "t9", "text": "x"}, `no task "t9"`, "t1, t2")
	tm(true, map[string]any{"action": "add", "task_id": 1, "text": "x"}, "must be a string")
	tm(true, map[string]any{"action": "add", "task_id": "t1"}, "add needs text")
	tm(true, map[string]any{"action": "complete", "step_id": "t1.99"}, `no step "t1.99"`)
	tm(true, map[string]any{"action": "complete", "task_id": "t2", "step_id": "t1.1"}, "no step")
	tm(true, map[string]any{"action": "switch"}, "switch needs task_id")
	tm(true, map[string]any{"action": "switch", "task_id": "nope"}, `no task "nope"`)
	tm(true, map[string]any{"action": "list", "query": 5}, "must be a string")
}

func TestWorkflowTaskManagerPersistsAcrossRestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	c := startServer(t, "-state-dir", dir)
	c.initialize("2025-11-25")
	wfCall(t, c, "TaskManager", map[string]any{"action": "create", "text": "Persist me"}, false)
	wfCall(t, c, "TaskManager", map[string]any{"action": "add", "text": "step one"}, false)
	c.in.Close()
	if err := <-c.done; err != nil {
		t.Fatal(err)
	}
	c.done <- nil // let the cleanup find it stopped

	c2 := startServer(t, "-state-dir", dir)
	c2.initialize("2025-11-25")
	wfCall(t, c2, "TaskManager", map[string]any{"action": "list"}, false, `* t1 "Persist me" [0/1]`)
	wfCall(t, c2, "TaskManager", map[string]any{"action": "create", "text": "Second"}, false, "Created task t2")
	var tf taskFile
	b, _ := os.ReadFile(filepath.Join(dir, "tasks.json"))
	if err := json.Unmarshal(b, &tf); err != nil || tf.Rev != 3 || len(tf.Tasks) != 2 {
		t.Fatalf("tasks.json: rev %d, %d tasks, %v:\n%s", tf.Rev, len(tf.Tasks), err, b)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "*.tmp-*")); len(left) > 0 {
		t.Fatalf("temp files left: %v", left)
	}
}

// Two telson processes add steps to one task at once: none is lost.
func TestWorkflowTaskManagerTwoProcesses(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	c := startServer(t, "-state-dir", dir)
	c.initialize("2025-11-25")
	wfCall(t, c, "TaskManager", map[string]any{"action": "create", "text": "shared"}, false)
	const perProcess = 25
	t.Run("writers", func(t *testing.T) {
		for _, name := range []string{"a", "b"} {
			name := name
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				p := startBinary(t, nil, "-state-dir", dir)
				p.initialize("2025-11-25")
				for i := 0; i < perProcess; i++ {
					wfCall(t, p, "TaskManager", map[string]any{"action": "add", "task_id": "t1", "text": fmt.Sprintf("%s-%d", name, i)}, false, "Added step")
				}
			})
		}
	})
	res := wfCall(t, c, "TaskManager", map[string]any{"action": "pending", "task_id": "t1"}, false)
	steps := wfStructured(t, res)["tasks"].([]any)[0].(map[string]any)["steps"].([]any)
	seen := map[string]bool{}
	for _, s := range steps {
		seen[s.(map[string]any)["id"].(string)] = true
		seen[s.(map[string]any)["text"].(string)] = true
	}
	for i := 0; i < perProcess; i++ {
		for _, name := range []string{"a", "b"} {
			if !seen[fmt.Sprintf("%s-%d", name, i)] {
				t.Errorf("step %s-%d lost", name, i)
			}
		}
	}
	if len(steps) != 2*perProcess || len(seen) != 4*perProcess {
		t.Fatalf("%d steps, %d distinct ids+texts; want %d", len(steps), len(seen), 2*perProcess)
	}
}

func TestWorkflowTaskManagerCorruptFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "tasks.json")
	os.WriteFile(path, []byte(`{"tasks": [oops`), 0o600)
	c := startServer(t, "-state-dir", dir)
	c.initialize("2025-06-18")
	for _, args := range []map[string]any{{"action": "list"}, {"action": "add", "text": "x"}, {"action": "create"}} {
		res := wfCall(t, c, "TaskManager", args, true, path, "corrupt", "left untouched")
		if _, ok := res["structuredContent"]; ok {
			t.Fatalf("error result with structured content: %v", res)
		}
	}
	if b, _ := os.ReadFile(path); string(b) != `{"tasks": [oops` {
		t.Fatalf("corrupt file changed: %s", b)
	}
	wfCall(t, c, "TaskManager", map[string]any{"action": "create", "text": "fresh"}, false, "was corrupt", ".corrupt-", "Created task t1")
	backups, _ := filepath.Glob(path + ".corrupt-*")
	if len(backups) != 1 {
		t.Fatalf("backups: %v", backups)
	}
	if b, _ := os.ReadFile(backups[0]); string(b) != `{"tasks": [oops` {
		t.Fatalf("backup holds %q", b)
	}
	wfCall(t, c, "TaskManager", map[string]any{"action": "list"}, false, `* t1 "fresh"`)

	// Valid JSON that is not a usable list is corrupt too; ids never repeat in a hand-edited file.
	os.WriteFile(path, []byte(`{"tasks":[null]}`), 0o600)
	wfCall(t, c, "TaskManager", map[string]any{"action": "list"}, true, "corrupt", "null")
	os.WriteFile(path, []byte(`{"tasks":[{"id":"t7","title":"hand","steps":[{"id":"t7.4","text":"s"}]}],"current":"t7"}`), 0o600)
	wfCall(t, c, "TaskManager", map[string]any{"action": "add", "text": "next"}, false, "Added step t7.5")
	wfCall(t, c, "TaskManager", map[string]any{"action": "create", "text": "next"}, false, "Created task t8")
}

func TestWorkflowTaskManagerFullListDropsOldestDone(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	tf := taskFile{NextID: maxTasks + 1}
	for i := 1; i <= maxTasks; i++ {
		tf.Tasks = append(tf.Tasks, &taskEntry{ID: fmt.Sprintf("t%d", i), Title: "x", Done: i == 5 || i == 9})
	}
	b, _ := json.Marshal(tf)
	os.WriteFile(filepath.Join(dir, "tasks.json"), b, 0o600)
	c := startServer(t, "-state-dir", dir)
	c.initialize("2025-06-18")
	wfCall(t, c, "TaskManager", map[string]any{"action": "create", "text": "new"}, false, "t5", "dropped", "Created task t201")
	wfCall(t, c, "TaskManager", map[string]any{"action": "create", "text": "new"}, false, "t9", "dropped", "Created task t202")
	wfCall(t, c, "TaskManager", map[string]any{"action": "create", "text": "new"}, true, "200 open tasks")
}

func TestWorkflowPlanMode(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	c := startServer(t, "-state-dir", dir)
	c.initialize("2025-06-18")
	pm := func(wantErr bool, args map[string]any, want ...string) map[string]any {
		t.Helper()
		return wfCall(t, c, "PlanMode", args, wantErr, want...)
	}
	res := pm(false, map[string]any{"action": "json"}, `{"active":false,"goal":null,"plan_file":null,"started_at":null}`)
	if sc := wfStructured(t, res); sc["active"] != false {
		t.Fatalf("json structured: %v", sc)
	}
	pm(false, map[string]any{"action": "status"}, "Plan mode: INACTIVE")
	pm(true, map[string]any{"action": "exit"}, "not active")
	pm(true, map[string]any{"action": "enter"}, "enter needs goal")
	pm(true, map[string]any{"action": "enter", "goal": strings.Repeat("g", 1001)}, "at most 1000")
	pm(true, map[string]any{"action": "plan"}, "must be one of")
	pm(true, map[string]any{"action": "enter", "goal": "x", "plan_file": dir}, "is a directory")
	res = pm(false, map[string]any{"action": "enter", "goal": "Move the Config loader!"}, "Plan mode activated. Write your plan as markdown.", "refused")
	sc := wfStructured(t, res)
	planFile := sc["plan_file"].(string)
	if planFile != filepath.Join(dir, "plans", "move-the-config-loader.md") || sc["active"] != true || sc["goal"] != "Move the Config loader!" {
		t.Fatalf("enter structured: %v", sc)
	}
	if _, err := time.Parse(time.RFC3339, sc["started_at"].(string)); err != nil {
		t.Fatalf("started_at: %v", err)
	}
	pm(true, map[string]any{"action": "enter", "goal": "again"}, "already active")
	pm(false, map[string]any{"action": "status"}, "Plan mode: ACTIVE", `Goal: "Move the Config loader!"`, "Duration: 0m ", planFile)
	pm(false, map[string]any{"action": "json"}, `"active":true`, `"plan_file":"`+planFile+`"`)

	// Gating: Bash is refused while planning.
	res = wfCall(t, c, "Bash", map[string]any{"command": "echo ran"}, true, "plan mode is active", "PlanMode")
	if strings.Contains(resultText(res), "ran\n") {
		t.Fatal("Bash ran in plan mode")
	}
	wfCall(t, c, "BackgroundBash", map[string]any{"command": "echo ran"}, true, "BackgroundBash: refused: plan mode is active")
	wfCall(t, c, "KillBgTask", map[string]any{"task_id": 1}, true, "KillBgTask: refused: plan mode is active")
	wfCall(t, c, "ListBgTasks", map[string]any{}, false)
	pm(true, map[string]any{"action": "exit"}, "no such file", "reset")
	os.WriteFile(planFile, []byte(""), 0o600)
	pm(true, map[string]any{"action": "exit"}, "empty or has not changed")
	os.WriteFile(planFile, []byte("# Plan\n1. move it\n"), 0o600)
	res = pm(false, map[string]any{"action": "exit"}, "Plan saved to "+planFile, "Exiting plan mode. Returning to execution.", "1. move it")
	if sc := wfStructured(t, res); sc["active"] != false || sc["plan"] != "# Plan\n1. move it\n" {
		t.Fatalf("exit structured: %v", sc)
	}
	wfCall(t, c, "Bash", map[string]any{"command": "echo ran"}, false, "ran")

	// Entering again with the same goal gets a new file, so an old plan is never taken as new.
	res = pm(false, map[string]any{"action": "enter", "goal": "Move the Config loader!"})
	if f := wfStructured(t, res)["plan_file"]; f != filepath.Join(dir, "plans", "move-the-config-loader-2.md") {
		t.Fatalf("second plan file: %v", f)
	}
	pm(false, map[string]any{"action": "reset"}, "Plan mode reset. No plan saved.")
	pm(false, map[string]any{"action": "reset"}, "not active")

	// An existing plan_file, relative to the shell's directory, must change before exit.
	wfCall(t, c, "Bash", map[string]any{"command": "cd " + dir}, false)
	os.WriteFile(filepath.Join(dir, "mine.md"), []byte("old plan\n"), 0o600)
	pm(false, map[string]any{"action": "enter", "goal": "g", "plan_file": "mine.md"}, filepath.Join(dir, "mine.md"))
	pm(true, map[string]any{"action": "exit"}, "has not changed")
	os.WriteFile(filepath.Join(dir, "mine.md"), []byte("new plan\n"), 0o600)
	pm(false, map[string]any{"action": "exit"}, "new plan")

	// A new session starts outside plan mode.
	pm(false, map[string]any{"action": "enter", "goal": "left active"})
	c2 := startServer(t, "-state-dir", dir)
	c2.initialize("2025-06-18")
	wfCall(t, c2, "PlanMode", map[string]any{"action": "status"}, false, "INACTIVE")
	wfCall(t, c2, "Bash", map[string]any{"command": "echo ok"}, false, "ok")
}

func TestWorkflowPlanModeNotStrict(t *testing.T) {
	t.Parallel()
	c := startServer(t, "-state-dir", t.TempDir(), "-plan-mode-strict", "0")
	c.initialize("2025-06-18")
	wfCall(t, c, "PlanMode", map[string]any{"action": "enter", "goal": "g"}, false, "Do not change anything")
	wfCall(t, c, "Bash", map[string]any{"command": "echo ran"}, false, "ran")
}

func TestWorkflowPlanModeOldProtocolHasNoStructured(t *testing.T) {
	t.Parallel()
	c := startServer(t, "-state-dir", t.TempDir())
	c.initialize("2025-03-26")
	res := wfCall(t, c, "PlanMode", map[string]any{"action": "json"}, false, `"active":false`)
	if _, ok := res["structuredContent"]; ok {
		t.Fatalf("structuredContent before 2025-06-18: %v", res)
	}
}

// wfSkill writes <root>/<name>/SKILL.md.
func wfSkill(t *testing.T, root, name, text string) string {
	t.Helper()
	p := filepath.Join(root, name, "SKILL.md")
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// Not parallel: it sets HOME.
func TestWorkflowSkillSearchOrder(t *testing.T) {
	home, proj, extra := t.TempDir(), t.TempDir(), t.TempDir()
	t.Setenv("HOME", home)
	skill := func(where string) string {
		return "---\nname: dup\ndescription: from " + where + "\n---\nbody from " + where + "\n"
	}
	wfSkill(t, filepath.Join(proj, ".claude", "skills"), "dup", skill("project"))
	wfSkill(t, filepath.Join(proj, ".agents", "skills"), "dup", skill("agents"))
	wfSkill(t, filepath.Join(home, ".claude", "skills"), "dup", skill("user-claude"))
	wfSkill(t, filepath.Join(home, ".telson", "skills"), "dup", skill("user-telson"))
	wfSkill(t, extra, "dup", skill("extra"))
	wfSkill(t, extra, "only-extra", "---\ndescription: extra only\n---\nx\n")
	c := startServer(t, "-state-dir", t.TempDir(), "-additional-skills", extra)
	c.initialize("2025-06-18")
	os.MkdirAll(filepath.Join(proj, "src", "deep"), 0o755)
	wfCall(t, c, "Bash", map[string]any{"command": "cd " + filepath.Join(proj, "src", "deep")}, false)
	for _, where := range []string{"project", "agents", "user-claude", "user-telson", "extra"} {
		res := wfCall(t, c, "InvokeSkill", map[string]any{"skill_name": "dup"}, false, "body from "+where)
		if where == "project" && !strings.HasPrefix(resultText(res), "[skill: dup | Project Skill | path: "+filepath.Join(proj, ".claude", "skills", "dup", "SKILL.md")+"]") {
			t.Fatalf("header: %s", resultText(res))
		}
		switch where { // remove the winner; the next folder takes over
		case "project":
			os.RemoveAll(filepath.Join(proj, ".claude"))
		case "agents":
			os.RemoveAll(filepath.Join(proj, ".agents"))
		case "user-claude":
			os.RemoveAll(filepath.Join(home, ".claude"))
		case "user-telson":
			os.RemoveAll(filepath.Join(home, ".telson"))
		}
	}
	wfCall(t, c, "InvokeSkill", map[string]any{"skill_name": "only-extra"}, false, "Additional Skill")
}

// Not parallel: it sets HOME.
func TestWorkflowSkillsListingPromptsAndChanges(t *testing.T) {
	home, proj := t.TempDir(), t.TempDir()
	t.Setenv("HOME", home)
	root := filepath.Join(proj, ".claude", "skills")
	wfSkill(t, root, "release-notes", "---\nname: release-notes\ndescription: >\n  Write release notes\n  for a version.\nargument-hint: \"<version> [audience]\"\n---\n\nNotes for $ARGUMENTS[0] aimed at $1 (all: $ARGUMENTS).\n")
	os.WriteFile(filepath.Join(root, "release-notes", "template.md"), []byte("t"), 0o644)
	wfSkill(t, root, "plain", "---\ndescription: 'It''s plain'\n---\nDo the plain thing.\n")
	wfSkill(t, root, "broken", "---\ndescription: no end\n")
	wfSkill(t, root, "misnamed", "---\nname: other\ndescription: d\n---\nx\n")
	wfSkill(t, root, "nodesc", "---\nname: nodesc\n---\nx\n")
	c := startServer(t, "-state-dir", t.TempDir())
	init := c.initialize("2025-06-18")
	if caps := init["result"].(map[string]any)["capabilities"].(map[string]any); caps["prompts"] == nil {
		t.Fatalf("no prompts capability: %v", caps)
	}
	wfCall(t, c, "Bash", map[string]any{"command": "cd " + proj}, false)
	// The first call from the project directory finds its skills and says the list changed.
	res := wfCall(t, c, "InvokeSkill", map[string]any{"skill_name": "release-notes", "arguments": `v2.3 "ops team"`}, false,
		"[skill: release-notes | Project Skill | path: ", "Notes for v2.3 aimed at ops team (all: v2.3 \"ops team\").", "Other files in", "- template.md")
	if strings.Contains(resultText(res), "name: release-notes") {
		t.Fatalf("front matter in the reply: %s", resultText(res))
	}
	if n := len(wfNotes(c, "notifications/tools/list_changed")); n < 1 {
		t.Fatalf("no tools/list_changed after the project's skills appeared")
	}
	wfCall(t, c, "InvokeSkill", map[string]any{"skill_name": "plain", "arguments": "extra words"}, false, "Do the plain thing.\n\nARGUMENTS: extra words")
	wfCall(t, c, "InvokeSkill", map[string]any{"skill_name": "plain"}, false, "Do the plain thing.")
	wfCall(t, c, "InvokeSkill", map[string]any{"skill_name": "relase-notes"}, true, `skill "relase-notes" not found`, "closest: release-notes")
	wfCall(t, c, "InvokeSkill", map[string]any{"skill_name": "broken"}, true, "not found")
	wfCall(t, c, "InvokeSkill", map[string]any{"skill_name": ""}, true, "at least 1")
	wfCall(t, c, "InvokeSkill", map[string]any{"skill_name": "plain", "arguments": 3}, true, "must be a string")

	list := c.request("tools/list", nil)["result"].(map[string]any)["tools"].([]any)
	var desc string
	for _, tl := range list {
		if tl.(map[string]any)["name"] == "InvokeSkill" {
			desc = tl.(map[string]any)["description"].(string)
		}
	}
	for _, want := range []string{"- plain: It's plain\n- release-notes: Write release notes for a version.\n", "(skipped " + filepath.Join(root, "broken"), "(skipped " + filepath.Join(root, "misnamed"), "(skipped " + filepath.Join(root, "nodesc")} {
		if !strings.Contains(desc, want) {
			t.Fatalf("description lacks %q:\n%s", want, desc)
		}
	}
	if !strings.Contains(c.stderr.String(), "skipping "+filepath.Join(root, "broken", "SKILL.md")) {
		t.Fatalf("no warning on stderr: %s", c.stderr.String())
	}

	prompts := c.request("prompts/list", nil)["result"].(map[string]any)["prompts"].([]any)
	if len(prompts) != 2 || prompts[1].(map[string]any)["name"] != "release-notes" ||
		prompts[1].(map[string]any)["arguments"].([]any)[0].(map[string]any)["description"] != "<version> [audience]" {
		t.Fatalf("prompts/list: %v", prompts)
	}
	got := c.request("prompts/get", map[string]any{"name": "release-notes", "arguments": map[string]any{"arguments": "v9 devs"}})
	msgs := got["result"].(map[string]any)["messages"].([]any)
	content := msgs[0].(map[string]any)["content"].(map[string]any)
	if msgs[0].(map[string]any)["role"] != "user" || content["type"] != "text" || content["text"] != "Notes for v9 aimed at devs (all: v9 devs).\n" {
		t.Fatalf("prompts/get: %v", got)
	}
	if code := errCode(c.request("prompts/get", map[string]any{"name": "nope"})); code != codeInvalidParams {
		t.Fatalf("prompts/get unknown: code %d", code)
	}
	if code := errCode(c.request("prompts/get", map[string]any{})); code != codeInvalidParams {
		t.Fatalf("prompts/get without name: code %d", code)
	}

	// A new skill: the list changes, and the client hears it once.
	wfNotes(c, "notifications/tools/list_changed")
	wfSkill(t, root, "newer", "---\ndescription: a new one\n---\nnew\n")
	wfCall(t, c, "InvokeSkill", map[string]any{"skill_name": "newer"}, false, "new")
	if n := len(wfNotes(c, "notifications/tools/list_changed")); n != 1 {
		t.Fatalf("%d tools/list_changed after adding a skill, want 1", n)
	}
	if n := len(wfNotes(c, "notifications/prompts/list_changed")); n < 1 {
		t.Fatalf("no prompts/list_changed")
	}
	wfCall(t, c, "InvokeSkill", map[string]any{"skill_name": "newer"}, false, "new")
	if n := len(wfNotes(c, "notifications/tools/list_changed")); n != 0 {
		t.Fatalf("tools/list_changed without a change")
	}
	list = c.request("tools/list", nil)["result"].(map[string]any)["tools"].([]any)
	if b, _ := json.Marshal(list); !strings.Contains(string(b), "- newer: a new one") {
		t.Fatal("tools/list still shows the old skill list")
	}
}

// The skill watch notices a new skill with no call at all.
func TestWorkflowSkillWatch(t *testing.T) {
	extra := t.TempDir()
	c := startServer(t, "-state-dir", t.TempDir(), "-additional-skills", extra)
	c.initialize("2025-06-18")
	wfSkill(t, extra, "watched", "---\ndescription: d\n---\nx\n")
	for {
		if m := c.recv(); m["method"] == "notifications/tools/list_changed" {
			break
		}
	}
}

func TestWorkflowExpandSkill(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ body, args, want string }{
		{"Fix $ARGUMENTS now", "issue 12", "Fix issue 12 now"},
		{"$0|$1|$2", `a "b c" 'd e'`, "a|b c|d e"},
		{"$ARGUMENTS[1] then $ARGUMENTS[0]", `x\ y z`, "z then x y"},
		{"missing: [$5] [$ARGUMENTS[3]]", "one", "missing: [] []"},
		{"no placeholder\n", "some args", "no placeholder\n\nARGUMENTS: some args"},
		{"no placeholder\n", "", "no placeholder\n"},
		{"dir ${CLAUDE_SKILL_DIR}/x", "", "dir /skills/s/x"},
		{"$ARGUMENTS", "", ""},
	} {
		if got := expandSkill(tc.body, tc.args, "/skills/s"); got != tc.want {
			t.Errorf("expandSkill(%q, %q) = %q, want %q", tc.body, tc.args, got, tc.want)
		}
	}
}

func TestWorkflowParseSkill(t *testing.T) {
	t.Parallel()
	meta, body, err := parseSkill("\ufeff---\r\nname: a\r\ndescription: first\r\n  continued\r\nargument-hint: \"[x]\"\r\nallowed-tools:\r\n  - Bash\r\nnotes: |\r\n  l1\r\n  l2\r\n---\r\n\r\nBody\r\n")
	if err != nil || meta["name"] != "a" || meta["description"] != "first continued" || meta["argument-hint"] != "[x]" || meta["notes"] != "l1\nl2" || body != "Body\n" {
		t.Fatalf("parseSkill: %q %q %v", meta, body, err)
	}
	for _, bad := range []string{"", "no front matter", "---\nname: x\n", "---\nname x\n---\n", "---\ndescription: \"open\n---\n"} {
		if _, _, err := parseSkill(bad); err == nil {
			t.Errorf("parseSkill(%q): no error", bad)
		}
	}
}

func TestWorkflowCallbacks(t *testing.T) {
	t.Parallel()
	c, s, clk := wfStart(t, map[string]string{"STATE_DIR": t.TempDir()})
	c.initialize("2025-06-18")
	cbk := func(wantErr bool, args map[string]any, want ...string) map[string]any {
		t.Helper()
		return wfCall(t, c, "SetCallback", args, wantErr, want...)
	}
	cbk(false, map[string]any{"action": "list"}, "No active callbacks.")
	cbk(false, map[string]any{"message": "check the deploy", "delay_seconds": 30, "repeat_count": 3}, "Callback scheduled: fires every 30s, repeats 3 times.", "Slot 0")
	cbk(false, map[string]any{"action": "set", "message": strings.Repeat("long message ", 10), "delay_seconds": 3600, "repeat_count": -1}, "repeats infinitely.", "Slot 1")
	clk.advance(18 * time.Second)
	cbk(false, map[string]any{"action": "list"}, "Active callbacks (2/8):\n  [0] \"check the deploy\" - fires in 0m12s (3 left)\n  [1] \"long message long message long message long message long message...\" - fires in 59m42s (infinite)")

	// A fire reaches the client at once and the next tool result once.
	clk.advance(12 * time.Second)
	res := cbk(false, map[string]any{"action": "list"}, "(2 left)")
	if first := res["content"].([]any)[0].(map[string]any)["text"]; first != "[callback 0] check the deploy" {
		t.Fatalf("notice: %v", res["content"])
	}
	msgs := wfNotes(c, "notifications/message")
	if len(msgs) != 1 || msgs[0]["params"].(map[string]any)["data"] != "[callback 0] check the deploy" {
		t.Fatalf("notifications/message: %v", msgs)
	}
	if text := resultText(cbk(false, map[string]any{"action": "list"})); strings.Contains(text, "[callback") {
		t.Fatalf("notice delivered twice: %s", text)
	}
	// Repeat count: two more fires, then the slot is free.
	clk.advance(30 * time.Second)
	clk.advance(30 * time.Second)
	clk.advance(30 * time.Second)
	text := resultText(cbk(false, map[string]any{"action": "list"}, "Active callbacks (1/8):"))
	if strings.Count(text, "[callback 0] check the deploy") != 2 || strings.Contains(text, "[0]") {
		t.Fatalf("after three fires: %s", text)
	}
	// Forever: fires again and again.
	for i := 0; i < 5; i++ {
		clk.advance(time.Hour)
	}
	cbk(false, map[string]any{"action": "list"}, "[1] ", "(infinite)")
	wfNotes(c, "notifications/message")

	// 0 means once.
	cbk(false, map[string]any{"message": "once", "delay_seconds": 1, "repeat_count": 0}, "repeats 1 times.", "Slot 0")
	clk.advance(time.Second)
	clk.advance(time.Second)
	text = resultText(cbk(false, map[string]any{"action": "list"}))
	if strings.Count(text, "[callback 0] once") != 1 || strings.Contains(text, "[0]") {
		t.Fatalf("one-shot: %s", text)
	}

	// Slot exhaustion.
	for i := 0; i < 7; i++ {
		cbk(false, map[string]any{"message": fmt.Sprintf("m%d", i), "delay_seconds": 60})
	}
	cbk(true, map[string]any{"message": "ninth", "delay_seconds": 60}, "Error: all callback slots full (max 8)")
	cbk(false, map[string]any{"action": "list"}, "Active callbacks (8/8):")

	// Cancel one, then all.
	cbk(false, map[string]any{"action": "cancel", "callback_id": 3}, `Cancelled callback slot 3: "m2"`)
	cbk(true, map[string]any{"action": "cancel", "callback_id": 3}, "Error: callback slot 3 is not active")
	cbk(true, map[string]any{"action": "cancel", "callback_id": 8}, "Error: callback_id 8 out of range (max 7)")
	cbk(true, map[string]any{"action": "cancel", "callback_id": -1}, "out of range")
	cbk(false, map[string]any{"message": "reuses slot 3", "delay_seconds": 5}, "Slot 3")
	cbk(false, map[string]any{"action": "cancel"}, "Cancelled 8 callbacks.")
	cbk(false, map[string]any{"action": "list"}, "No active callbacks.")
	if n := clk.armed(); n != 0 {
		t.Fatalf("%d timers still armed after cancel", n)
	}
	clk.advance(2 * time.Hour)
	if text := resultText(cbk(false, map[string]any{"action": "list"})); strings.Contains(text, "[callback") {
		t.Fatalf("a cancelled callback fired: %s", text)
	}

	// Bad input, parameter by parameter.
	cbk(true, map[string]any{"delay_seconds": 5}, "Error: missing message parameter")
	cbk(true, map[string]any{"message": "  ", "delay_seconds": 5}, "Error: missing message parameter")
	cbk(true, map[string]any{"message": strings.Repeat("x", 2049), "delay_seconds": 5}, "max 2048")
	cbk(true, map[string]any{"message": "m"}, "missing delay_seconds")
	cbk(true, map[string]any{"message": "m", "delay_seconds": 7200}, "Error: delay_seconds must be between 1 and 3600 (got 7200)")
	cbk(true, map[string]any{"message": "m", "delay_seconds": 0}, "(got 0)")
	cbk(true, map[string]any{"message": "m", "delay_seconds": 1.5}, "must be an integer")
	cbk(true, map[string]any{"message": "m", "delay_seconds": 5, "repeat_count": -2}, "repeat_count")
	cbk(true, map[string]any{"action": "snooze"}, "must be one of")
	cbk(true, map[string]any{"action": "cancel", "callback_id": "2"}, "must be an integer")

	// The session's end stops every timer.
	cbk(false, map[string]any{"message": "m", "delay_seconds": 5})
	s.stopWorkflow()
	if n := clk.armed(); n != 0 {
		t.Fatalf("%d timers armed after the session ended", n)
	}
	cbk(true, map[string]any{"message": "m", "delay_seconds": 5}, "Error: callback slots not available")
}

// BenchmarkWorkflowSkillCatalog compares a refresh that finds nothing
// changed (what every tool call and the two-second watch cost) with a full
// re-read of 50 skills.
func BenchmarkWorkflowSkillCatalog(b *testing.B) {
	root := b.TempDir()
	for i := 0; i < 50; i++ {
		p := filepath.Join(root, fmt.Sprintf("skill-%02d", i), "SKILL.md")
		os.MkdirAll(filepath.Dir(p), 0o755)
		os.WriteFile(p, []byte(fmt.Sprintf("---\nname: skill-%02d\ndescription: >\n  does thing %d\n---\nbody $ARGUMENTS\n", i, i)), 0o644)
	}
	srv := newServer(loadConfig(map[string]string{"ADDITIONAL_SKILLS": root}), io.Discard)
	srv.skills.refresh(srv, root)
	b.Run("unchanged", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			srv.skills.refresh(srv, root)
		}
	})
	b.Run("rescan", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			srv.skills.mu.Lock()
			srv.skills.sig = ""
			srv.skills.mu.Unlock()
			srv.skills.refresh(srv, root)
		}
	})
}

// BenchmarkWorkflowTaskFile measures TaskManager calls that write (lock,
// read, fsync'd atomic replace) and that only read, against the baseline of a
// plain os.WriteFile of the same 51-step file.
func BenchmarkWorkflowTaskFile(b *testing.B) {
	dir := b.TempDir()
	srv := newServer(loadConfig(map[string]string{"STATE_DIR": dir}), io.Discard)
	s := newSession(srv, io.Discard)
	defer s.stopWorkflow()
	ctx := context.Background()
	runTaskManager(ctx, &toolCall{s: s, args: json.RawMessage(`{"action":"create","text":"bench"}`)})
	for i := 0; i < 50; i++ {
		runTaskManager(ctx, &toolCall{s: s, args: json.RawMessage(`{"action":"add","text":"a step of moderate length"}`)})
	}
	data, _ := os.ReadFile(filepath.Join(dir, "tasks.json"))
	b.Run("baseline-writefile", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			os.WriteFile(filepath.Join(dir, "plain.json"), data, 0o600)
		}
	})
	runTaskManager(ctx, &toolCall{s: s, args: json.RawMessage(`{"action":"create","text":"other"}`)})
	b.Run("switch", func(b *testing.B) { // each switch changes the file: lock, read, fsync, rename
		for i := 0; i < b.N; i++ {
			res := runTaskManager(ctx, &toolCall{s: s, args: json.RawMessage(fmt.Sprintf(`{"action":"switch","task_id":"t%d"}`, 1+i%2))})
			if res.isError {
				b.Fatal(res.content[0].Text)
			}
		}
	})
	b.Run("list", func(b *testing.B) { // lock and read only
		for i := 0; i < b.N; i++ {
			runTaskManager(ctx, &toolCall{s: s, args: json.RawMessage(`{"action":"list"}`)})
		}
	})
}

// A lock another process holds makes a call fail after a while instead of hanging.
func TestWorkflowTaskManagerLockHeld(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	c := startServer(t, "-state-dir", dir)
	c.initialize("2025-06-18")
	wfCall(t, c, "TaskManager", map[string]any{"action": "create", "text": "x"}, false)
	f, err := os.OpenFile(filepath.Join(dir, "tasks.json.lock"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	wfCall(t, c, "TaskManager", map[string]any{"action": "list"}, true, "another process holds it")
	syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	wfCall(t, c, "TaskManager", map[string]any{"action": "list"}, false, `* t1 "x"`)
}
