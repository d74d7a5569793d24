// tools_workflow.go holds the workflow tools: TaskManager (a task list per
// project in STATE_DIR/tasks.json, shared by every telson process), PlanMode
// (per session; while active, Bash runs read-only), InvokeSkill (SKILL.md
// folders) and SetCallback (per-session timers delivered through the notice
// queue).
//
// Rules:
//   - files are read and written through machine.go only: readCapped and listDir; writeState,
//     under STATE_DIR; no lock is held across a file read or write;
//   - tasks.json changes only under an flock on tasks.json.lock, is read again inside the lock
//     and is replaced atomically, through a symlink if it is one; one that does not parse is
//     kept under another name and a new list started, unless it is a symlink: then it is refused;
//   - a plan is written only to a new file in STATE_DIR/plans; a plan file the agent names is
//     read, never written;
//   - the skills are read at each InvokeSkill call and at each tools/list, from Bash's working
//     directory's project: nothing is cached.
package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

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
	tasksFile    = "tasks.json" // in STATE_DIR
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
		if exists(d + "/.git") {
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
	set := c.s.srv.set
	var res toolResult
	err := withStateLock(ctx, set, tasksFile, func() error {
		tf, kept, err := loadTasks(set)
		if err != nil {
			return err
		}
		text, shown, err := tf.apply(a)
		if err != nil {
			return fmt.Errorf("%s%w", kept, err)
		}
		text = kept + text
		res = structuredResult(text, map[string]any{"project": a.project,
			"current": tf.Current[a.project], "tasks": shown, "message": text})
		if a.Action == "list" || a.Action == "pending" {
			return nil // the list is unchanged
		}
		removeStaleTemps(set, tasksFile)
		out, _ := json.MarshalIndent(tf, "", "  ")
		return writeState(set, tasksFile, out, true)
	})
	if err != nil {
		return errorResult("%v", err)
	}
	return res
}

// loadTasks reads tasks.json; a missing file is an empty list. A file that does not parse is
// kept under another name and a new list started: kept says so.
func loadTasks(set *settings) (tf *taskFile, kept string, err error) {
	path, err := statePath(set, tasksFile)
	var data []byte
	if err == nil {
		data, err = readCapped(path, maxTaskFile)
	}
	if errors.Is(err, os.ErrNotExist) {
		data, err = []byte("{}"), nil
	}
	if err != nil {
		return nil, "", fmt.Errorf("%s is unusable (%w); it was left untouched: "+
			"fix, move or delete it", path, err)
	}
	tf, err = parseTasks(data)
	if err == nil {
		return tf, "", nil
	}
	aside, kerr := keepAside(set, tasksFile)
	if kerr != nil {
		return nil, "", fmt.Errorf("%s does not parse (%v), and %w", path, err, kerr)
	}
	kept = fmt.Sprintf("%s was corrupt (%v): it is kept as %s, and a new list started.\n",
		path, err, aside)
	return &taskFile{Current: map[string]string{}}, kept, nil
}

// parseTasks decodes tasks.json and rejects entries apply cannot use.
func parseTasks(data []byte) (*taskFile, error) {
	tf := &taskFile{}
	err := json.Unmarshal(data, tf)
	for _, t := range tf.Tasks {
		if t == nil || slices.Contains(t.Steps, nil) {
			err = cmp.Or(err, errors.New("a task or step is null"))
		}
	}
	if tf.Current == nil {
		tf.Current = map[string]string{}
	}
	return tf, err
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
		text, err = t.mark(a.StepID, false)
	case "complete":
		text, err = tf.complete(t, a)
	case "pending":
		text, _ = t.open()
		text = "Open steps of task " + t.line() + ":" + text
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
	return fmt.Sprintf("Created task %s %q; it is now the current task.", t.ID, t.Title),
		[]*taskEntry{t}, nil
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

// mark sets step id (2 of t, or 1.2) done, or else in progress, the only
// one of its task.
func (t *taskEntry) mark(id string, done bool) (string, error) {
	want := "t" + id
	if !strings.Contains(want, ".") {
		want = t.ID + "." + id
	}
	i := slices.IndexFunc(t.Steps, func(s *taskStep) bool { return s.ID == want })
	if i < 0 {
		open, _ := t.open()
		return "", fmt.Errorf("task %s has no step %q; its open steps:%s", t.ID, id, open)
	}
	for _, s := range t.Steps {
		s.InProgress = s.InProgress && done
	}
	s := t.Steps[i]
	s.Done = done
	s.InProgress = !done
	if done {
		return fmt.Sprintf("Completed step %s of task %s.", s.ID, t.line()), nil
	}
	t.Done = false
	return fmt.Sprintf("Step %s of task %s is in progress.", s.ID, t.line()), nil
}

// complete marks step_id done, else t with its steps; with steps open only
// if force.
func (tf *taskFile) complete(t *taskEntry, a taskArgs) (string, error) {
	if a.StepID != "" {
		return t.mark(a.StepID, true)
	}
	open, n := t.open()
	if n > 0 && !a.Force {
		return "", fmt.Errorf("task %s has open steps; complete them, or pass force: true:%s",
			t.ID, open)
	}
	for _, s := range t.Steps {
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

// open is t's steps not done, a line each, and how many there are.
func (t *taskEntry) open() (string, int) {
	text := ""
	n := 0
	for _, s := range t.Steps {
		if s.Done {
			continue
		}
		n++
		text += "\n- " + s.ID + " " + s.Text
		if s.InProgress {
			text += " (in progress)"
		}
	}
	return cmp.Or(text, " none"), n
}

// line is t on one line: id, title, progress.
func (t *taskEntry) line() string {
	_, open := t.open()
	s := fmt.Sprintf("%s %q [%d/%d]", t.ID, t.Title, len(t.Steps)-open, len(t.Steps))
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
  you can read every file, writes fail (/tmp too: scratch files go to $TMPDIR).
- exit: pass the plan as markdown in plan, or write it to the plan file first. An inline plan
  is saved to a new file in STATE_DIR/plans; a plan file you name is read, never written.
  If the client can ask, the user approves the plan or sends you back to planning with a note.
- status: the state. reset: leave without a plan.
Plan mode belongs to this connection.`,
	input: `{"type":"object","properties":{
		"action":{"type":"string","enum":["enter","exit","status","reset"]},
		"goal":{"type":"string","maxLength":1000,"description":"What the plan is for (enter)."},
		"plan":{"type":"string","maxLength":1048576,"description":"The plan, markdown (exit)."},
		"plan_file":{"type":"string","maxLength":4096,
			"description":"Plan file to read at exit (enter; default: new in STATE_DIR/plans)."}
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

// planInfo is a session's active plan mode; nil when none is. It is replaced
// whole, never changed, so no lock is held across file I/O.
type planInfo struct {
	goal    string
	file    string // the plan file: read at exit without an inline plan
	started time.Time
}

// planActive reports whether plan mode is active and PLAN_MODE_STRICT on:
// then Bash runs read-only.
func (s *session) planActive() bool {
	return s.workflow.plan.Load() != nil && s.srv.set.PlanModeStrict
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
		text := "Plan mode is not active. Nothing to reset."
		if c.s.workflow.plan.Swap(nil) != nil {
			text = "Plan mode reset. No plan saved."
		}
		return planResult(nil, text, nil)
	}
	text := "Plan mode: INACTIVE"
	if in != nil {
		text = fmt.Sprintf("Plan mode: ACTIVE\nGoal: %q\nDuration: %s\nPlan file: %s",
			in.goal, time.Since(in.started).Round(time.Second), in.file)
	}
	return planResult(in, text, nil)
}

// planResult is text with the state in (goal, plan_file and started_at null
// when inactive), the text as message, and extra fields.
func planResult(in *planInfo, text string, extra map[string]any) toolResult {
	v := map[string]any{"active": in != nil, "goal": nil, "plan_file": nil, "started_at": nil,
		"message": text}
	if in != nil {
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
		file = filepath.Join(c.s.srv.set.StateDir, planDir, newPlanName())
	}
	file = c.s.shell.resolve(file)
	_, err := readCapped(file, maxPlanBytes)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return errorResult("plan_file: %v", err)
	}
	gate := "Bash and BackgroundBash run read-only until you exit: read the code, writes fail " +
		"(scratch files go to $TMPDIR)."
	if !c.s.srv.set.PlanModeStrict {
		gate = "Do not change anything until you exit plan mode."
	}
	text := fmt.Sprintf("Plan mode activated. Write your plan as markdown.\nGoal: %q\n"+
		"Plan file: %s\n%s\nThen exit with {\"action\":\"exit\",\"plan\":\"...\"}.",
		goal, file, gate)
	in := &planInfo{goal: goal, file: file, started: time.Now()}
	for !c.s.workflow.plan.CompareAndSwap(nil, in) {
		if old := c.s.workflow.plan.Load(); old != nil {
			return errorResult("plan mode is already active (goal %q); exit or reset it first",
				old.goal)
		}
	}
	return planResult(in, text, nil)
}

// planDir is the folder in STATE_DIR that telson writes plans in.
const planDir = "plans"

// newPlanName names a new plan file in planDir.
func newPlanName() string {
	return time.Now().Format("20060102-150405.000000") + ".md"
}

// take returns the plan to exit with, and in with the file holding it. An inline plan is
// saved to in's file when that is a new one in STATE_DIR/plans, else to a new one there;
// without one, the plan file is read.
func (in planInfo) take(set *settings, plan string) (*planInfo, string, error) {
	if strings.TrimSpace(plan) == "" {
		b, err := readCapped(in.file, maxPlanBytes)
		if err == nil && strings.TrimSpace(string(b)) == "" {
			err = fmt.Errorf("plan file %s is empty", in.file)
		}
		return &in, string(b), err
	}
	dir := filepath.Join(set.StateDir, planDir)
	name, err := filepath.Rel(dir, in.file)
	if err != nil || !filepath.IsLocal(name) {
		name = newPlanName()
	}
	err = writeState(set, filepath.Join(planDir, name), []byte(plan), false)
	if errors.Is(err, os.ErrExist) {
		name = newPlanName()
		err = writeState(set, filepath.Join(planDir, name), []byte(plan), false)
	}
	in.file = filepath.Join(dir, name)
	return &in, plan, err
}

// exitPlan leaves plan mode with the plan, unless the user asked for more
// planning; then in stays, holding the file the plan is in.
func exitPlan(ctx context.Context, c *toolCall, in *planInfo, plan string) toolResult {
	if in == nil {
		return errorResult("plan mode is not active; nothing to exit")
	}
	next, plan, err := in.take(c.s.srv.set, plan)
	if err != nil {
		return errorResult("%v. Pass the plan as plan (or reset to leave without one).", err)
	}
	saved := "Plan saved to " + next.file
	if next.file != in.file {
		saved += " (" + in.file + " is read, never written)"
	}
	// When the client can show a form, the user approves the plan or keeps planning.
	approval, note := planNotAsked, ""
	if canElicit(c.req) {
		ctx, cancel := context.WithTimeout(ctx, c.s.srv.set.AskTimeout)
		defer cancel()
		raw, ask, err := elicit(ctx, c, "approve", map[string]any{
			"message":         "Approve this plan?\n\n" + plan,
			"requestedSchema": json.RawMessage(planApproval)})
		if ask != nil { // the 2026-07-28 era: the answer comes with the retried call
			c.s.workflow.plan.CompareAndSwap(in, next)
			return toolResult{inputRequired: ask}
		}
		var r struct {
			Action  string
			Content struct{ Decision, Note string }
		}
		if err == nil && json.Unmarshal(raw, &r) == nil {
			approval, note = planKeep, r.Content.Note
			if r.Action == "accept" && r.Content.Decision == "approve" {
				approval = planApproved
			}
		}
	}
	text := "The user wants more planning: plan mode stays active. Revise the plan, exit again."
	if approval != planKeep {
		next = nil
		text = "Exiting plan mode. Returning to execution."
	}
	if approval == planApproved {
		text = "The user approved the plan. " + text
	}
	c.s.workflow.plan.CompareAndSwap(in, next)
	if note != "" {
		text += "\nNote from the user: " + note
	}
	text = saved + "\n" + text + "\n\n" + plan
	return planResult(next, text, map[string]any{"plan": plan, "approval": approval, "note": note})
}

// ---- InvokeSkill ----

var invokeSkillTool = toolDef{
	name:  "InvokeSkill",
	title: "Load a skill",
	describe: func(s *session) string {
		skills := s.srv.scanSkills(s.shell.dir())
		list := ""
		for _, sk := range skills[:min(len(skills), maxSkillsList)] {
			list += "\n- " + sk.name + ": " + cutRunes(sk.description, 250)
		}
		return `Invoke or load a skill by name.
Returns the skill content for you to follow or use as context: a header (skill, source, path),
and its text with $ARGUMENTS replaced by arguments (appended when it has no $ARGUMENTS);
the other files of its folder (scripts, references) are beside its path.
Skill folders, in search order: .claude/skills in the shell's project (its git root),
~/.claude/skills, ~/.telson/skills, ADDITIONAL_SKILLS.

Available skills (the first 200):` + cmp.Or(list, " none")
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
	maxSkillBytes       = 256 << 10 // a SKILL.md, and a skill expanded with its arguments
	maxSkillsRoot       = 1000      // folders read in one skills folder
	maxSkillsList       = 200       // skills listed in the description
	maxSkillDescription = 1024      // characters of a skill's description kept
)

type skillInfo struct{ name, description, source, path string } // path of SKILL.md

// scanSkills returns the skills of the project of dir, in search order, and logs the broken
// ones.
func (srv *server) scanSkills(dir string) []skillInfo {
	skills, broken := scanSkills(srv.set, projectOf(dir))
	for _, err := range broken {
		srv.log.Warn("skills", "err", err)
	}
	return skills
}

// skillSources names a skill's origin by its folder's place in the search order.
var skillSources = []string{"Project Skill", "User Skill", "User Skill", "Additional Skill"}

// scanSkills reads the skills in project's skill folders. Their search order:
// .claude/skills in project, ~/.claude/skills, ~/.telson/skills, then
// ADDITIONAL_SKILLS; the first folder holding a name wins.
func scanSkills(set *settings, project string) ([]skillInfo, []error) {
	// ADDITIONAL_SKILLS is a comma list; an entry may also be a colon list, as PATH is
	roots := append([]string{project + "/.claude/skills", "~/.claude/skills", "~/.telson/skills"},
		filepath.SplitList(strings.Join(set.AdditionalSkills, ":"))...)
	var skills []skillInfo
	var broken []error
	for i, root := range roots {
		root = expandHome(root, set.env.home)
		for _, e := range listDir(root, maxSkillsRoot) {
			sk := skillInfo{name: e.Name(), source: skillSources[min(i, 3)],
				path: filepath.Join(root, e.Name(), "SKILL.md")}
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
	return skills, broken
}

// skillName is a name InvokeSkill's description may list: a folder's name can hold anything
// (a newline, invisible characters) but a slash.
var skillName = regexp.MustCompile(`^[\p{L}\p{N}._-]{1,64}$`)

// load reads sk's SKILL.md: it sets the description and returns the body.
func (sk *skillInfo) load() (body string, err error) {
	if !skillName.MatchString(sk.name) {
		return "", errors.New("a skill's name (its folder's) is at most 64 letters, digits, '.', '_', '-'")
	}
	b, err := readCapped(sk.path, maxSkillBytes)
	if err == nil {
		sk.description, body, err = parseSkill(string(b))
	}
	return body, err
}

// parseSkill splits SKILL.md into its description, from the front matter
// (one-line key: value pairs, in double quotes or none; the name is the
// folder's), and its body. The description is required, on one line.
func parseSkill(text string) (description, body string, err error) {
	text = strings.ReplaceAll(strings.TrimPrefix(text, "\ufeff"), "\r\n", "\n")
	rest, opened := strings.CutPrefix(text, "---\n")
	front, rest, closed := strings.Cut(rest, "\n---")
	if !opened || !closed {
		return "", "", errors.New("broken front matter: it must start and end with a --- line")
	}
	_, description, _ = strings.Cut("\n"+front, "\ndescription:")
	description, _, _ = strings.Cut(description, "\n")
	description = strings.TrimSpace(description)
	if u, err := strconv.Unquote(description); err == nil {
		description = u
	}
	// It goes into InvokeSkill's description: what a reader cannot see goes; it is capped.
	description = cutRunes(stripControls(description), maxSkillDescription)
	if strings.Trim(description, ">|+-") == "" { // none, or a YAML block scalar
		return "", "", errors.New("no description on one line")
	}
	_, body, _ = strings.Cut(rest, "\n")
	return description, strings.TrimLeft(body, "\n"), nil
}

// expandSkill fills body's placeholders, in one pass; with none, non-empty
// args are appended. The result is at most maxSkillBytes.
func expandSkill(body, args, dir string) (string, error) {
	if !strings.Contains(body, "$ARGUMENTS") && strings.TrimSpace(args) != "" {
		body = strings.TrimRight(body, "\n") + "\n\nARGUMENTS: $ARGUMENTS"
	}
	size := len(body) + strings.Count(body, "$ARGUMENTS")*len(args) +
		strings.Count(body, "${CLAUDE_SKILL_DIR}")*len(dir)
	if size > maxSkillBytes {
		return "", fmt.Errorf("the skill with its arguments is larger than %d bytes", maxSkillBytes)
	}
	return strings.NewReplacer("$ARGUMENTS", args, "${CLAUDE_SKILL_DIR}", dir).Replace(body), nil
}

func runInvokeSkill(ctx context.Context, c *toolCall) toolResult {
	var a struct {
		SkillName string `json:"skill_name"`
		Arguments string
	}
	json.Unmarshal(c.args, &a) // schema-checked
	name := strings.TrimSpace(a.SkillName)
	var names []string
	for _, sk := range c.s.srv.scanSkills(c.s.shell.dir()) {
		if sk.name != name {
			names = append(names, sk.name)
			continue
		}
		body, err := sk.load()
		if err == nil {
			body, err = expandSkill(body, a.Arguments, filepath.Dir(sk.path))
		}
		if err != nil {
			return errorResult("%v", err)
		}
		return textResult(fmt.Sprintf("[skill: %s | %s | path: %s]\n\n%s", sk.name, sk.source, sk.path, body))
	}
	return errorResult("skill %q not found; available: %s", name, strings.Join(names, ", "))
}

// ---- SetCallback ----

var setCallbackTool = toolDef{
	name:  "SetCallback",
	title: "Set a reminder for yourself",
	description: `Reminds you of message after delay_seconds.
Use it to check on a deploy, a build or a background task later. It fires once.
A fired reminder reaches you as "[callback N] <message>" at the top of your next telson tool
result: it cannot wake you while you are idle.
- set (the default): message and delay_seconds are required.
- list: the active reminders (slots 0-7). cancel: slot callback_id, or all.`,
	input: `{"type":"object","properties":{
		"action":{"type":"string","enum":["set","list","cancel"]},
		"message":{"type":"string","maxLength":2048,
			"description":"What you are told when it fires."},
		"delay_seconds":{"type":"integer","minimum":1,"maximum":3600,
			"description":"Seconds until it fires."},
		"callback_id":{"type":"integer","minimum":0,"maximum":7,
			"description":"Slot to cancel (default: all)."}}}`,
	run: runSetCallback,
}

const callbackSlotCount = 8

// callbackSlots is a session's eight callback timers.
type callbackSlots struct {
	announce func(line string)

	mu      sync.Mutex // guards slots and stopped
	slots   [callbackSlotCount]*callbackSlot
	stopped bool
}

type callbackSlot struct {
	message string
	fireAt  time.Time
	timer   *time.Timer
}

type callbackArgs struct {
	Action       string
	Message      string
	DelaySeconds int64 `json:"delay_seconds"` // 0: not given (the schema's minimum is 1)
	CallbackID   int64 `json:"callback_id"`   // -1: not given (the schema's minimum is 0)
}

func (cb *callbackSlots) fire(i int, sl *callbackSlot) {
	cb.mu.Lock()
	mine := cb.slots[i] == sl // not cancelled, and the session goes on
	if mine {
		cb.slots[i] = nil
	}
	cb.mu.Unlock()
	if mine {
		cb.announce(fmt.Sprintf("[callback %d] %s", i, sl.message))
	}
}

func runSetCallback(ctx context.Context, c *toolCall) toolResult {
	a := callbackArgs{CallbackID: -1}
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
		left := max(time.Until(sl.fireAt), 0).Round(time.Second)
		text += fmt.Sprintf("\n  [%d] %q - fires in %s", i, sl.message, left)
		n++
	}
	if n == 0 {
		return textResult("No active callbacks.")
	}
	return textResult(fmt.Sprintf("Active callbacks (%d/%d):", n, callbackSlotCount) + text)
}

// cancel stops slot id, or every slot when id < 0; the caller holds cb.mu.
func (cb *callbackSlots) cancel(id int64) toolResult {
	text := ""
	n := 0
	for i, sl := range cb.slots {
		if sl != nil && (id < 0 || int64(i) == id) {
			sl.timer.Stop()
			cb.slots[i] = nil
			n++
			text = fmt.Sprintf("Cancelled callback slot %d: %q", i, sl.message)
		}
	}
	switch {
	case id < 0 && n == 1:
		return textResult("Cancelled 1 callback.")
	case id < 0:
		return textResult(fmt.Sprintf("Cancelled %d callbacks.", n))
	case n == 0:
		return errorResult("callback slot %d is not active", id)
	}
	return textResult(text)
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
	delay := time.Duration(a.DelaySeconds) * time.Second
	sl := &callbackSlot{message: a.Message, fireAt: time.Now().Add(delay)}
	sl.timer = time.AfterFunc(delay, func() { cb.fire(i, sl) })
	cb.slots[i] = sl
	return textResult(fmt.Sprintf("Callback scheduled in slot %d: fires in %ds. "+
		`Cancel it with {"action":"cancel","callback_id":%d}.`, i, a.DelaySeconds, i))
}

// ---- the session's workflow state ----

// sessionWorkflow is a session's plan mode and callbacks.
type sessionWorkflow struct {
	plan      atomic.Pointer[planInfo] // nil: plan mode is not active
	callbacks *callbackSlots
}

func newSessionWorkflow(s *session) *sessionWorkflow {
	return &sessionWorkflow{callbacks: &callbackSlots{announce: s.notices.push}}
}

// stopWorkflow ends the session's callbacks.
func (s *session) stopWorkflow() {
	cb := s.workflow.callbacks
	cb.mu.Lock()
	defer cb.mu.Unlock()
	cb.stopped = true
	cb.cancel(-1)
}
