// tools_workflow.go holds the workflow tools: TaskManager (a task list per
// project in STATE_DIR/tasks.json, shared by every telson process), PlanMode
// (per session; while active, Bash runs read-only), InvokeSkill (SKILL.md
// folders, also served as MCP prompts) and SetCallback (per-session timers
// delivered through the notice queue).
//
// Rules:
//   - every file read here goes through readCapped: a regular file, opened
//     without blocking, read through a cap; no lock is held across an open or
//     read that can block;
//   - tasks.json changes only under an flock on tasks.json.lock, is read again
//     inside the lock and is replaced atomically, through a symlink if it is one;
//     one that does not parse is never overwritten;
//   - callback timers go through callbackSlots.afterFunc, so tests drive them;
//   - the skill catalogue is read again at each InvokeSkill call, tools/list,
//     prompts/list and prompts/get, for the shell's current project.
package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unicode/utf8"
)

// readCapped reads path, which must be a regular file of at most limit bytes.
// The open does not block: a FIFO is refused, not waited on.
func readCapped(path string, limit int64) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	switch {
	case err != nil:
		return nil, err
	case !fi.Mode().IsRegular():
		return nil, fmt.Errorf("read %s: not a regular file", path)
	case fi.Size() > limit:
		return nil, fmt.Errorf("read %s: larger than %d bytes", path, limit)
	}
	return io.ReadAll(io.LimitReader(f, limit))
}

// withStateLock runs fn holding an exclusive flock on path+".lock". It gives
// up after 5 s, so a stuck process cannot hang a tool call.
func withStateLock(ctx context.Context, path string, fn func() error) error {
	os.MkdirAll(filepath.Dir(path), 0o700) // the open below reports a failure
	f, err := os.OpenFile(path+".lock", os.O_CREATE|os.O_RDWR|syscall.O_NONBLOCK, 0o600)
	if err != nil {
		return err
	}
	defer f.Close() // closing releases the flock
	deadline := time.Now().Add(5 * time.Second)
	// Holders keep the lock for milliseconds, so polling is cheap.
	for syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) != nil {
		if ctx.Err() != nil || time.Now().After(deadline) {
			return fmt.Errorf("lock %s.lock: another process holds it; try again", path)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return fn()
}

// writeFileAtomic replaces path, a regular file or missing, with data: temp
// file in the same folder, fsync, rename. A symlink is written through.
func writeFileAtomic(path string, data []byte) error {
	if target, err := filepath.EvalSymlinks(path); err == nil {
		path = target
	}
	if fi, err := os.Lstat(path); err == nil && !fi.Mode().IsRegular() { // a dangling link too
		return fmt.Errorf("write %s: not a regular file", path)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".tmp-*")
	if err != nil {
		return err // os's errors name the file
	}
	defer os.Remove(tmp.Name()) // fails harmlessly after the rename
	_, err = tmp.Write(data)
	if err = errors.Join(err, tmp.Sync(), tmp.Close()); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// ---- TaskManager ----

var taskManagerTool = toolDef{
	name:  "TaskManager",
	title: "Keep a task list",
	description: `A persistent task list with steps, kept per project.
Use it like TodoWrite for multi-step work (3 or more steps) and to keep track across a long
session. The project is the git root of the shell's directory, else that directory.

- create: a task titled text; it becomes the project's current task.
- add: step text to task_id (default: the current task).
- start: mark step_id in progress. complete: mark step_id done; without step_id, the task
  (refused while steps are open, unless force).
- list: this project's tasks (all: every project's). pending: a task's open steps.
- switch: make task_id the current task.
Ids: task 3 or t3; step 2 (of the task) or t3.2.`,
	input: `{"type":"object","properties":{
		"action":{"type":"string",
			"enum":["create","add","start","complete","list","pending","switch"]},
		"task_id":{"type":"string",
			"description":"Task id, 3 or \"t3\" (default: the current task)."},
		"step_id":{"type":"string","description":"Step id, 2 or \"t3.2\"."},
		"text":{"type":"string","maxLength":500,"description":"Task title (create) or step (add)."},
		"all":{"type":"boolean","description":"list: every project's tasks."},
		"force":{"type":"boolean","description":"complete: close the open steps too."}},
		"required":["action"]}`,
	output: `{"type":"object","required":["project","current","tasks","message"],"properties":{
		"project":{"type":"string"},"current":{"type":"string"},"message":{"type":"string"},
		"tasks":{"type":"array","items":{"type":"object","properties":{
			"id":{"type":"string"},"title":{"type":"string"},"project":{"type":"string"},
			"done":{"type":"boolean"},"created":{"type":"string"},
			"steps":{"type":"array","items":{"type":"object","properties":{
				"id":{"type":"string"},"text":{"type":"string"},
				"done":{"type":"boolean"},"in_progress":{"type":"boolean"}}}}}}}}}`,
	run: runTaskManager,
}

const (
	maxTasks     = 200 // when full, create drops the oldest completed task
	maxTaskSteps = 100
	maxTaskFile  = 16 << 20
)

// taskFile is STATE_DIR/tasks.json.
type taskFile struct {
	Current map[string]string `json:"current_by_project"` // project → task id
	Tasks   []*taskEntry      `json:"tasks"`
}

type taskEntry struct {
	ID      string      `json:"id"`
	Title   string      `json:"title"`
	Project string      `json:"project"`
	Done    bool        `json:"done"`
	Created time.Time   `json:"created"`
	Steps   []*taskStep `json:"steps"`
}

type taskStep struct {
	ID         string `json:"id"`
	Text       string `json:"text"`
	Done       bool   `json:"done"`
	InProgress bool   `json:"in_progress,omitempty"`
}

type taskArgs struct {
	Action  string
	TaskID  string `json:"task_id"` // without its "t" (a bare number arrives as a string)
	StepID  string `json:"step_id"`
	Text    string
	All     bool
	Force   bool
	project string
}

// projectOf is dir's git root (the nearest folder holding .git), else dir.
func projectOf(dir string) string {
	for d := dir; d != filepath.Dir(d); d = filepath.Dir(d) {
		if _, err := os.Lstat(filepath.Join(d, ".git")); err == nil {
			return d
		}
	}
	return dir
}

func runTaskManager(ctx context.Context, c *toolCall) toolResult {
	var a taskArgs
	json.Unmarshal(c.args, &a) // schema-checked
	a.Text = strings.TrimSpace(a.Text)
	a.TaskID = strings.TrimPrefix(a.TaskID, "t")
	a.StepID = strings.TrimPrefix(a.StepID, "t")
	a.project = projectOf(c.s.shell.dir())
	path := filepath.Join(c.s.srv.set.StateDir, "tasks.json")
	var res toolResult
	err := withStateLock(ctx, path, func() error {
		tf, err := loadTasks(path)
		if err != nil {
			return err
		}
		text, shown, err := tf.apply(a)
		if err != nil {
			return err
		}
		res = structuredResult(text, map[string]any{"project": a.project,
			"current": tf.Current[a.project], "tasks": shown, "message": text})
		if a.Action == "list" || a.Action == "pending" {
			return nil // the list is unchanged
		}
		out, _ := json.MarshalIndent(tf, "", "  ")
		return writeFileAtomic(path, out)
	})
	if err != nil {
		return errorResult("%v", err)
	}
	return res
}

// loadTasks reads path; a missing file is an empty list. It rejects entries
// apply cannot use.
func loadTasks(path string) (*taskFile, error) {
	tf := &taskFile{Current: map[string]string{}}
	data, err := readCapped(path, maxTaskFile)
	if errors.Is(err, os.ErrNotExist) {
		return tf, nil
	}
	if err == nil {
		err = json.Unmarshal(data, tf)
	}
	for _, t := range tf.Tasks {
		if t == nil || slices.Contains(t.Steps, nil) {
			err = cmp.Or(err, errors.New("a task or step is null"))
		}
	}
	if err != nil {
		return nil, fmt.Errorf("%s is unusable (%w); it was left untouched: fix, move or delete it",
			path, err)
	}
	if tf.Current == nil {
		tf.Current = map[string]string{}
	}
	return tf, nil
}

// apply performs one action and returns its reply and the tasks it shows.
func (tf *taskFile) apply(a taskArgs) (string, []*taskEntry, error) {
	if a.Text == "" && (a.Action == "create" || a.Action == "add") {
		return "", nil, fmt.Errorf("%s needs text: the task's title, or the step", a.Action)
	}
	switch a.Action {
	case "list":
		return tf.list(a)
	case "create":
		return tf.create(a)
	}
	t, err := tf.find(a)
	if err != nil {
		return "", nil, err
	}
	text := ""
	switch a.Action {
	case "add":
		text, err = t.add(a.Text)
	case "start":
		text, err = t.start(a.StepID)
	case "complete":
		text, err = tf.complete(t, a)
	case "pending":
		text = "Open steps of task " + t.line() + ":" + stepLines(t.open())
	case "switch":
		tf.Current[a.project] = t.ID
		text = "Switched to task " + t.line() + "."
	}
	return text, []*taskEntry{t}, err
}

// find is the task task_id names, else step_id's task, else the current one.
func (tf *taskFile) find(a taskArgs) (*taskEntry, error) {
	id := tf.Current[a.project]
	task, _, ok := strings.Cut(a.StepID, ".")
	if ok {
		id = "t" + task
	}
	if a.TaskID != "" {
		id = "t" + a.TaskID
	}
	if id == "" {
		return nil, fmt.Errorf("no current task in %s: create or switch to one (list shows them)",
			a.project)
	}
	i := slices.IndexFunc(tf.Tasks, func(x *taskEntry) bool { return x.ID == id })
	if i < 0 {
		return nil, fmt.Errorf("no task %q (list shows them)", id)
	}
	return tf.Tasks[i], nil
}

func (tf *taskFile) create(a taskArgs) (string, []*taskEntry, error) {
	if len(tf.Tasks) >= maxTasks {
		i := slices.IndexFunc(tf.Tasks, func(x *taskEntry) bool { return x.Done })
		if i < 0 {
			return "", nil, fmt.Errorf("the list holds %d open tasks, the most it keeps", maxTasks)
		}
		tf.Tasks = slices.Delete(tf.Tasks, i, i+1) // the oldest completed task
	}
	next := 1
	for _, x := range tf.Tasks {
		n, _ := strconv.Atoi(strings.TrimPrefix(x.ID, "t"))
		next = max(next, n+1)
	}
	t := &taskEntry{ID: "t" + strconv.Itoa(next), Title: a.Text, Project: a.project,
		Created: time.Now().UTC(), Steps: []*taskStep{}}
	tf.Tasks = append(tf.Tasks, t)
	tf.Current[a.project] = t.ID
	text := fmt.Sprintf("Created task %s %q; it is now the current task.", t.ID, t.Title)
	return text, []*taskEntry{t}, nil
}

func (t *taskEntry) add(text string) (string, error) {
	if len(t.Steps) >= maxTaskSteps {
		return "", fmt.Errorf("task %s has %d steps, the most it keeps", t.ID, maxTaskSteps)
	}
	s := &taskStep{ID: fmt.Sprintf("%s.%d", t.ID, len(t.Steps)+1), Text: text}
	t.Steps = append(t.Steps, s)
	t.Done = false
	return fmt.Sprintf("Added step %s to task %s.", s.ID, t.line()), nil
}

// step finds id: 2 (of t), or 1.2.
func (t *taskEntry) step(id string) (*taskStep, error) {
	want := "t" + id
	if !strings.Contains(want, ".") {
		want = t.ID + "." + id
	}
	i := slices.IndexFunc(t.Steps, func(s *taskStep) bool { return s.ID == want })
	if i < 0 {
		return nil, fmt.Errorf("task %s has no step %q; its open steps:%s", t.ID, id,
			stepLines(t.open()))
	}
	return t.Steps[i], nil
}

// start marks a step in progress, the only one of its task.
func (t *taskEntry) start(id string) (string, error) {
	s, err := t.step(id)
	if err != nil {
		return "", err
	}
	for _, x := range t.Steps {
		x.InProgress = false
	}
	s.InProgress = true
	s.Done = false
	t.Done = false
	return fmt.Sprintf("Step %s of task %s is in progress.", s.ID, t.line()), nil
}

func (tf *taskFile) complete(t *taskEntry, a taskArgs) (string, error) {
	if a.StepID != "" {
		s, err := t.step(a.StepID)
		if err != nil {
			return "", err
		}
		s.Done = true
		s.InProgress = false
		return fmt.Sprintf("Completed step %s of task %s.", s.ID, t.line()), nil
	}
	open := t.open()
	if len(open) > 0 && !a.Force {
		return "", fmt.Errorf("task %s has open steps; complete them, or pass force: true:%s",
			t.ID, stepLines(open))
	}
	for _, s := range open {
		s.Done = true
		s.InProgress = false
	}
	t.Done = true
	text := fmt.Sprintf("Completed task %s.", t.line())
	if tf.Current[a.project] == t.ID {
		delete(tf.Current, a.project)
		text += " No task is current now."
	}
	return text, nil
}

func (tf *taskFile) list(a taskArgs) (string, []*taskEntry, error) {
	text := "Tasks (* = current):"
	shown := []*taskEntry{}
	for _, t := range tf.Tasks {
		if t.Project != a.project && !a.All {
			continue
		}
		mark := "\n  "
		if t.ID == tf.Current[a.project] {
			mark = "\n* "
		}
		text += mark + t.line()
		if t.Project != a.project {
			text += " in " + t.Project
		}
		shown = append(shown, t)
	}
	if len(shown) == 0 {
		text = "No tasks in " + a.project + ". create starts one; all lists every project's."
	}
	return text, shown, nil
}

// open is t's steps not done.
func (t *taskEntry) open() []*taskStep {
	var open []*taskStep
	for _, s := range t.Steps {
		if !s.Done {
			open = append(open, s)
		}
	}
	return open
}

func stepLines(steps []*taskStep) string {
	text := ""
	for _, s := range steps {
		text += "\n- " + s.ID + " " + s.Text
		if s.InProgress {
			text += " (in progress)"
		}
	}
	return cmp.Or(text, " none")
}

// line is t on one line: id, title, progress.
func (t *taskEntry) line() string {
	s := fmt.Sprintf("%s %q [%d/%d]", t.ID, t.Title, len(t.Steps)-len(t.open()), len(t.Steps))
	if t.Done {
		s += " done"
	}
	return s
}

// ---- PlanMode ----

var planModeTool = toolDef{
	name:  "PlanMode",
	title: "Plan before acting",
	description: `Plan mode: look at the code and write a plan before changing anything.

- enter (goal required): plan mode starts. Until exit, Bash and BackgroundBash run read-only:
  you can read files, writes fail.
- exit: pass the plan as markdown in plan (it is saved to the plan file), or write it to the
  plan file first. If the client can ask, the user approves the plan or sends you back to
  planning with a note.
- status: the state. reset: leave without a plan.
Plan mode belongs to this connection.`,
	input: `{"type":"object","properties":{
		"action":{"type":"string","enum":["enter","exit","status","reset"]},
		"goal":{"type":"string","maxLength":1000,"description":"What the plan is for (enter)."},
		"plan":{"type":"string","maxLength":1048576,"description":"The plan, markdown (exit)."},
		"plan_file":{"type":"string","maxLength":4096,
			"description":"Where the plan is kept (enter; default: a new file in STATE_DIR/plans)."}
		},
		"required":["action"]}`,
	output: `{"type":"object","required":["active","goal","plan_file","started_at","message"],
		"properties":{"active":{"type":"boolean"},"goal":{"type":["string","null"]},
		"plan_file":{"type":["string","null"]},"started_at":{"type":["string","null"]},
		"plan":{"type":"string"},"message":{"type":"string"},"note":{"type":"string"},
		"approval":{"type":"string","enum":["approved","keep planning","not asked"]}}}`,
	run: runPlanMode,
}

const (
	maxPlanBytes = 1 << 20
	planApproved = "approved"
	planKeep     = "keep planning"
	planNotAsked = "not asked"
)

// planApproval is the form that asks the user to approve a plan.
const planApproval = `{"type":"object","required":["decision"],"properties":{
	"decision":{"type":"string","title":"Decision","enum":["approve","keep planning"]},
	"note":{"type":"string","title":"Note for the agent (optional)"}}}`

// planInfo is a session's plan mode. It is replaced whole, never changed, so
// no lock is held across file I/O.
type planInfo struct {
	active  bool
	goal    string
	file    string
	started time.Time
}

// planActive reports whether plan mode is active and PLAN_MODE_STRICT on:
// then Bash runs read-only.
func (s *session) planActive() bool {
	return s.workflow.plan.Load().active && s.srv.set.PlanModeStrict
}

func runPlanMode(ctx context.Context, c *toolCall) toolResult {
	var a struct {
		Action, Goal, Plan string
		PlanFile           string `json:"plan_file"`
	}
	json.Unmarshal(c.args, &a) // schema-checked
	in := c.s.workflow.plan.Load()
	switch a.Action {
	case "enter":
		return enterPlan(c, strings.TrimSpace(a.Goal), strings.TrimSpace(a.PlanFile))
	case "exit":
		return exitPlan(ctx, c, in, a.Plan)
	case "reset":
		return resetPlan(c.s.workflow.plan.Swap(&planInfo{}))
	}
	return in.status()
}

func (in *planInfo) status() toolResult {
	text := "Plan mode: INACTIVE"
	if in.active {
		d := time.Since(in.started).Round(time.Second)
		text = fmt.Sprintf("Plan mode: ACTIVE\nGoal: %q\nDuration: %s\nPlan file: %s",
			in.goal, d, in.file)
	}
	return in.result(text, nil)
}

// resetPlan is the reply to reset, which replaced old.
func resetPlan(old *planInfo) toolResult {
	text := "Plan mode reset. No plan saved."
	if !old.active {
		text = "Plan mode is not active. Nothing to reset."
	}
	return planInfo{}.result(text, nil)
}

// result is text with the state (goal, plan_file and started_at null when
// inactive), the text as message, and extra fields.
func (in planInfo) result(text string, extra map[string]any) toolResult {
	v := map[string]any{"active": in.active, "goal": nil, "plan_file": nil, "started_at": nil,
		"message": text}
	if in.active {
		v["goal"] = in.goal
		v["plan_file"] = in.file
		v["started_at"] = in.started.UTC().Format(time.RFC3339)
	}
	maps.Copy(v, extra)
	return structuredResult(text, v)
}

func enterPlan(c *toolCall, goal, file string) toolResult {
	if goal == "" {
		return errorResult("enter needs goal, what the plan is for")
	}
	if file == "" {
		dir := filepath.Join(c.s.srv.set.StateDir, "plans")
		os.MkdirAll(dir, 0o700) // writing the plan reports a failure
		file = filepath.Join(dir, time.Now().Format("20060102-150405.000000")+".md")
	}
	file = c.s.shell.resolve(file)
	if _, err := readCapped(file, maxPlanBytes); err != nil && !errors.Is(err, os.ErrNotExist) {
		return errorResult("plan_file: %v", err)
	}
	gate := "Bash and BackgroundBash run read-only until you exit: read the code, writes fail."
	if !c.s.srv.set.PlanModeStrict {
		gate = "Do not change anything until you exit plan mode."
	}
	text := fmt.Sprintf("Plan mode activated. Write your plan as markdown.\nGoal: %q\n"+
		"Plan file: %s\n%s\nThen exit with {\"action\":\"exit\",\"plan\":\"...\"}.",
		goal, file, gate)
	in := &planInfo{active: true, goal: goal, file: file, started: time.Now()}
	old := c.s.workflow.plan.Load()
	if old.active || !c.s.workflow.plan.CompareAndSwap(old, in) {
		return errorResult("plan mode is already active (goal %q); exit or reset it first",
			old.goal)
	}
	return in.result(text, nil)
}

func exitPlan(ctx context.Context, c *toolCall, in *planInfo, plan string) toolResult {
	if !in.active {
		return errorResult("plan mode is not active; nothing to exit")
	}
	if strings.TrimSpace(plan) != "" {
		if err := writeFileAtomic(in.file, []byte(plan)); err != nil {
			return errorResult("%v", err)
		}
	} else {
		b, err := readCapped(in.file, maxPlanBytes)
		if err == nil && strings.TrimSpace(string(b)) == "" {
			err = fmt.Errorf("plan file %s is empty", in.file)
		}
		if err != nil {
			return errorResult("%v. Pass the plan as plan (or reset to leave without one).", err)
		}
		plan = string(b)
	}
	approval, note, ask := approvePlan(ctx, c, plan)
	if ask != nil {
		return toolResult{inputRequired: ask}
	}
	text := "Exiting plan mode. Returning to execution."
	switch approval {
	case planApproved:
		text = "The user approved the plan. " + text
	case planKeep:
		text = "The user wants more planning: plan mode stays active. Revise the plan, exit again."
	}
	if approval != planKeep {
		c.s.workflow.plan.CompareAndSwap(in, &planInfo{})
	}
	if note != "" {
		text += "\nNote from the user: " + note
	}
	text = fmt.Sprintf("Plan saved to %s\n%s\n\n%s", in.file, text, plan)
	return c.s.workflow.plan.Load().result(text,
		map[string]any{"plan": plan, "approval": approval, "note": note})
}

// approvePlan asks the user to approve plan when the client can show a form;
// ask is the input-required result of the 2026-07-28 era's first call.
func approvePlan(ctx context.Context, c *toolCall, plan string) (
	approval, note string, ask map[string]any) {
	if !canElicit(c.req) {
		return planNotAsked, "", nil
	}
	params := map[string]any{"message": "Approve this plan?\n\n" + plan,
		"requestedSchema": json.RawMessage(planApproval)}
	raw, ask, err := elicit(ctx, c, "approve", params)
	var r struct {
		Action  string
		Content struct{ Decision, Note string }
	}
	if ask != nil || err != nil || json.Unmarshal(raw, &r) != nil {
		return planNotAsked, "", ask
	}
	if r.Action == "accept" && r.Content.Decision == "approve" {
		return planApproved, r.Content.Note, nil
	}
	return planKeep, r.Content.Note, nil
}

// ---- skills: InvokeSkill and MCP prompts ----

var invokeSkillTool = toolDef{
	name:  "InvokeSkill",
	title: "Load a skill",
	describe: func(srv *server) string {
		_, skills := srv.skills.refresh(srv, "")
		list := ""
		for _, sk := range skills[:min(len(skills), maxSkillsList)] {
			list += "\n- " + sk.name + ": " + cutRunes(sk.description, 250)
		}
		return `Invoke or load a skill by name.
Returns the skill content for you to follow or use as context: a header (skill, source, path),
its text with $ARGUMENTS replaced by arguments (appended when it has no $ARGUMENTS).
Skill folders, in search order: .claude/skills in the shell's project (its git root),
~/.claude/skills, ~/.telson/skills, ADDITIONAL_SKILLS.

Available skills (at most 200; prompts/list names all):` + cmp.Or(list, " none")
	},
	input: `{"type":"object","properties":{
		"skill_name":{"type":"string","minLength":1,"maxLength":200,
			"description":"The skill's name, as listed."},
		"arguments":{"type":"string","maxLength":10000,"description":"Fills $ARGUMENTS."}},
		"required":["skill_name"]}`,
	hints: toolHints{readOnly: true, idempotent: true},
	run:   runInvokeSkill,
}

const (
	maxSkillBytes = 256 << 10 // a SKILL.md, and a skill expanded with its arguments
	maxSkillArgs  = 10000     // characters of arguments
	maxSkillsRoot = 1000      // folders read in one skills folder
	maxSkillsList = 200       // skills listed in the description
)

type skillInfo struct{ name, description, hint, source, path string } // path of SKILL.md

// skillCatalog is the skills found on disk, re-read at each refresh.
type skillCatalog struct {
	mu     sync.Mutex // guards the fields below
	dir    string     // project of the last scan
	sig    string     // the skills of the last scan, as text
	gen    int64      // bumped each time sig changes
	skills []skillInfo
}

// skillRoots lists the skill folders in search order; the first holding a name wins.
func skillRoots(set *settings, project string) []skillInfo {
	home, _ := os.UserHomeDir()
	roots := []skillInfo{
		{path: filepath.Join(project, ".claude", "skills"), source: "Project Skill"},
		{path: filepath.Join(home, ".claude", "skills"), source: "User Skill"},
		{path: filepath.Join(home, ".telson", "skills"), source: "User Skill"}}
	for _, d := range set.AdditionalSkills {
		d = strings.TrimSpace(d)
		if rest, ok := strings.CutPrefix(d, "~/"); ok {
			d = filepath.Join(home, rest)
		}
		roots = append(roots, skillInfo{path: d, source: "Additional Skill"})
	}
	return roots
}

// refresh re-reads the skills of the project of dir and returns the
// catalogue's generation, bumped when the skills changed, and the skills, in
// search order. Broken skills are logged when the skills change. With dir ""
// it returns the last scan's skills, scanning once when none was made: so
// tools/list stays cheap, and checkSkills tells clients of changes.
func (sc *skillCatalog) refresh(srv *server, dir string) (int64, []skillInfo) {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if dir == "" && sc.gen > 0 {
		return sc.gen, sc.skills
	}
	sc.dir = projectOf(cmp.Or(dir, sc.dir))
	var skills []skillInfo
	var broken []error
	for _, r := range skillRoots(srv.set, sc.dir) {
		entries, _ := os.ReadDir(r.path)
		for _, e := range entries[:min(len(entries), maxSkillsRoot)] {
			sk := skillInfo{name: e.Name(), source: r.source}
			sk.path = filepath.Join(r.path, sk.name, "SKILL.md")
			_, err := sk.load()
			switch {
			case errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ENOTDIR):
			case err != nil:
				broken = append(broken, fmt.Errorf("skipping %s: %w", sk.path, err))
			case !slices.ContainsFunc(skills, func(s skillInfo) bool { return s.name == sk.name }):
				skills = append(skills, sk) // unless an earlier folder has it
			}
		}
	}
	sig := fmt.Sprint(skills, broken)
	if sig != sc.sig {
		sc.sig = sig
		sc.gen++
		sc.skills = skills
		for _, err := range broken {
			srv.log.Warn("skills", "err", err)
		}
	}
	return sc.gen, sc.skills
}

// load reads sk's SKILL.md: it sets the description and hint and returns the body.
func (sk *skillInfo) load() (string, error) {
	b, err := readCapped(sk.path, maxSkillBytes)
	if err != nil {
		return "", err
	}
	meta, body, err := parseSkill(string(b))
	sk.description = meta["description"]
	sk.hint = meta["argument-hint"]
	return body, err
}

// parseSkill splits SKILL.md into front matter (one-line key: value pairs,
// in double quotes or none; the name is the folder's) and body. The
// description is required, on one line.
func parseSkill(text string) (map[string]string, string, error) {
	text = strings.ReplaceAll(strings.TrimPrefix(text, "\ufeff"), "\r\n", "\n")
	rest, opened := strings.CutPrefix(text, "---\n")
	front, rest, closed := strings.Cut(rest, "\n---")
	if !opened || !closed {
		return nil, "", errors.New("broken front matter: it must start and end with a --- line")
	}
	_, body, _ := strings.Cut(rest, "\n")
	meta := map[string]string{}
	for _, line := range strings.Split(front, "\n") {
		k, v, _ := strings.Cut(line, ":")
		v = strings.TrimSpace(v)
		if u, err := strconv.Unquote(v); err == nil {
			v = u
		}
		meta[k] = v // an indented key is none of the ones looked up
	}
	if strings.Trim(meta["description"], ">|+-") == "" { // none, or a YAML block scalar
		return nil, "", errors.New("no description on one line")
	}
	return meta, strings.TrimLeft(body, "\n"), nil
}

// expandSkill fills body's placeholders; with none, non-empty args are
// appended. The result is at most maxSkillBytes.
func expandSkill(body, args, dir string) (string, error) {
	uses := strings.Count(body, "$ARGUMENTS")
	size := len(body) + uses*len(args) + strings.Count(body, "${CLAUDE_SKILL_DIR}")*len(dir)
	switch {
	case utf8.RuneCountInString(args) > maxSkillArgs:
		return "", fmt.Errorf("arguments are longer than %d characters", maxSkillArgs)
	case size > maxSkillBytes:
		return "", fmt.Errorf("the skill with its arguments is larger than %d bytes", maxSkillBytes)
	case uses == 0 && strings.TrimSpace(args) != "":
		body = strings.TrimRight(body, "\n") + "\n\nARGUMENTS: $ARGUMENTS"
	}
	body = strings.ReplaceAll(body, "${CLAUDE_SKILL_DIR}", dir)
	return strings.ReplaceAll(body, "$ARGUMENTS", args), nil
}

// checkSkills re-reads the catalogue for the shell's directory if a SKILL.md
// changed (it stats a few folders), tells the client when it changed since
// this session last knew it, and returns the skills.
func (s *session) checkSkills() []skillInfo {
	gen, skills := s.srv.skills.refresh(s.srv, s.shell.dir())
	if s.workflow.skillGen.Swap(gen) != gen {
		s.notify("notifications/tools/list_changed")
	}
	return skills
}

// loadSkill finds name and returns it with its expanded text, or an error listing the skills.
func (s *session) loadSkill(name, args string) (skillInfo, string, error) {
	var names []string
	for _, sk := range s.checkSkills() {
		if sk.name != name {
			names = append(names, sk.name)
			continue
		}
		body, err := sk.load()
		if err == nil {
			body, err = expandSkill(body, args, filepath.Dir(sk.path))
		}
		return sk, body, err
	}
	return skillInfo{}, "", fmt.Errorf("skill %q not found; available: %s", name,
		strings.Join(names, ", "))
}

func runInvokeSkill(ctx context.Context, c *toolCall) toolResult {
	var a struct {
		SkillName string `json:"skill_name"`
		Arguments string
	}
	json.Unmarshal(c.args, &a) // schema-checked
	sk, text, err := c.s.loadSkill(strings.TrimSpace(a.SkillName), a.Arguments)
	if err != nil {
		return errorResult("%v", err)
	}
	return textResult(fmt.Sprintf("[skill: %s | %s | path: %s]\n\n%s",
		sk.name, sk.source, sk.path, text))
}

func handlePromptsList(ctx context.Context, r *rpcRequest) (any, error) {
	prompts := []map[string]any{}
	for _, sk := range r.s.checkSkills() {
		prompts = append(prompts, map[string]any{"name": sk.name, "description": sk.description,
			"arguments": []map[string]any{{"name": "arguments",
				"description": cmp.Or(sk.hint, "Arguments for the skill ($ARGUMENTS)")}}})
	}
	return map[string]any{"prompts": prompts}, nil
}

func handlePromptsGet(ctx context.Context, r *rpcRequest) (any, error) {
	var p struct {
		Name      string
		Arguments map[string]string
	}
	json.Unmarshal(r.params, &p) // a name that is no string is not found
	sk, text, err := r.s.loadSkill(p.Name, p.Arguments["arguments"])
	if err != nil {
		return nil, newRPCError(codeInvalidParams, "invalid params: %v", err)
	}
	return map[string]any{"description": sk.description, "messages": []map[string]any{
		{"role": "user", "content": map[string]any{"type": "text", "text": text}}}}, nil
}

// ---- SetCallback ----

var setCallbackTool = toolDef{
	name:  "SetCallback",
	title: "Set a reminder for yourself",
	description: `Reminds you of message after delay_seconds.
Use it to check on a deploy, a build or a background task later. It fires once unless
repeat_count says more; repeats re-arm from each fire.
A fired reminder reaches you as "[callback N] <message>" at the top of your next telson tool
result: it cannot wake you while you are idle.
- set (the default): message and delay_seconds are required.
- list: the active reminders (slots 0-7). cancel: slot callback_id, or all.`,
	input: `{"type":"object","properties":{
		"action":{"type":"string","enum":["set","list","cancel"]},
		"message":{"type":"string","maxLength":2048,
			"description":"What you are told when it fires."},
		"delay_seconds":{"type":"integer","minimum":1,"maximum":3600,
			"description":"Seconds until it fires, and between repeats."},
		"repeat_count":{"type":"integer","minimum":-1,"maximum":10000,
			"description":"How many times it fires: default 1, -1 forever."},
		"callback_id":{"type":"integer","minimum":0,"maximum":7,
			"description":"Slot to cancel (default: all)."}}}`,
	run: runSetCallback,
}

const callbackSlotCount = 8

type stopper interface{ Stop() bool }

// callbackSlots is a session's eight callback timers.
type callbackSlots struct {
	afterFunc func(d time.Duration, f func()) stopper // time.AfterFunc; tests replace it
	now       func() time.Time
	announce  func(line string)

	mu      sync.Mutex // guards slots and stopped
	slots   [callbackSlotCount]*callbackSlot
	stopped bool
}

type callbackSlot struct {
	message   string
	delay     time.Duration
	remaining int64 // fires left; negative forever
	fireAt    time.Time
	timer     stopper
}

type callbackArgs struct {
	Action       string
	Message      string
	DelaySeconds int64 `json:"delay_seconds"` // 0: not given (the schema's minimum is 1)
	RepeatCount  int64 `json:"repeat_count"`
	CallbackID   int64 `json:"callback_id"` // -1: not given (the schema's minimum is 0)
}

// arm puts sl in slot i and starts its timer; the caller holds cb.mu.
func (cb *callbackSlots) arm(i int, sl *callbackSlot) {
	cb.slots[i] = sl
	sl.fireAt = cb.now().Add(sl.delay)
	sl.timer = cb.afterFunc(sl.delay, func() { cb.fire(i, sl) })
}

func (cb *callbackSlots) fire(i int, sl *callbackSlot) {
	cb.mu.Lock()
	if cb.slots[i] != sl { // cancelled, or the session ended
		cb.mu.Unlock()
		return
	}
	sl.remaining--
	if sl.remaining == 0 {
		cb.slots[i] = nil
	} else {
		cb.arm(i, sl)
	}
	cb.mu.Unlock()
	cb.announce(fmt.Sprintf("[callback %d] %s", i, sl.message))
}

// stopAll stops every slot and returns how many were active.
func (cb *callbackSlots) stopAll() int {
	n := 0
	for i, sl := range cb.slots {
		if sl != nil {
			sl.timer.Stop()
			cb.slots[i] = nil
			n++
		}
	}
	return n
}

func runSetCallback(ctx context.Context, c *toolCall) toolResult {
	a := callbackArgs{RepeatCount: 1, CallbackID: -1}
	json.Unmarshal(c.args, &a) // schema-checked: every integer is bounded
	cb := c.s.workflow.callbacks
	cb.mu.Lock()
	defer cb.mu.Unlock()
	switch {
	case cb.stopped:
		return errorResult("callback slots not available")
	case a.Action == "list":
		return cb.list()
	case a.Action == "cancel":
		return cb.cancel(a.CallbackID)
	}
	return cb.set(a)
}

func (cb *callbackSlots) list() toolResult {
	text := ""
	n := 0
	for i, sl := range cb.slots {
		if sl == nil {
			continue
		}
		left := max(sl.fireAt.Sub(cb.now()), 0).Round(time.Second)
		count := "infinite"
		if sl.remaining >= 0 {
			count = fmt.Sprintf("%d left", sl.remaining)
		}
		text += fmt.Sprintf("\n  [%d] %q - fires in %s (%s)", i, sl.message, left, count)
		n++
	}
	if n == 0 {
		return textResult("No active callbacks.")
	}
	return textResult(fmt.Sprintf("Active callbacks (%d/%d):", n, callbackSlotCount) + text)
}

// cancel stops slot id, or every slot when id < 0.
func (cb *callbackSlots) cancel(id int64) toolResult {
	if id < 0 {
		n := cb.stopAll()
		if n == 1 {
			return textResult("Cancelled 1 callback.")
		}
		return textResult(fmt.Sprintf("Cancelled %d callbacks.", n))
	}
	sl := cb.slots[id] // the schema bounds id
	if sl == nil {
		return errorResult("callback slot %d is not active", id)
	}
	sl.timer.Stop()
	cb.slots[id] = nil
	return textResult(fmt.Sprintf("Cancelled callback slot %d: %q", id, sl.message))
}

func (cb *callbackSlots) set(a callbackArgs) toolResult {
	i := slices.Index(cb.slots[:], nil)
	switch {
	case strings.TrimSpace(a.Message) == "":
		return errorResult("missing message parameter")
	case a.DelaySeconds == 0:
		return errorResult("missing delay_seconds parameter (1-3600)")
	case i < 0:
		return errorResult("all callback slots full (max %d)", callbackSlotCount)
	}
	delay := a.DelaySeconds
	times := fmt.Sprintf("fires every %ds, %d times.", delay, a.RepeatCount)
	switch a.RepeatCount {
	case 0, 1: // both mean once
		a.RepeatCount = 1
		times = fmt.Sprintf("fires once in %ds.", delay)
	case -1:
		times = fmt.Sprintf("fires every %ds until cancelled.", delay)
	}
	cb.arm(i, &callbackSlot{message: a.Message, delay: time.Duration(delay) * time.Second,
		remaining: a.RepeatCount})
	return textResult(fmt.Sprintf(
		`Callback scheduled in slot %d: %s Cancel it with {"action":"cancel","callback_id":%d}.`,
		i, times, i))
}

// ---- the session's workflow state ----

// sessionWorkflow is a session's plan mode, callbacks and skill catalogue generation.
type sessionWorkflow struct {
	plan      atomic.Pointer[planInfo] // never nil
	callbacks *callbackSlots
	skillGen  atomic.Int64 // catalogue generation this session's client knows
}

func newSessionWorkflow(s *session) *sessionWorkflow {
	w := &sessionWorkflow{callbacks: &callbackSlots{announce: s.notices.push, now: time.Now,
		afterFunc: func(d time.Duration, f func()) stopper { return time.AfterFunc(d, f) }}}
	w.plan.Store(&planInfo{})
	return w
}

// stopWorkflow ends the session's callbacks.
func (s *session) stopWorkflow() {
	cb := s.workflow.callbacks
	cb.mu.Lock()
	defer cb.mu.Unlock()
	cb.stopped = true
	cb.stopAll()
}
