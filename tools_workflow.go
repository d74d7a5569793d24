// tools_workflow.go holds the workflow tools: TaskManager (a task list per
// project in STATE_DIR/tasks.json, shared by every telson process), PlanMode
// (per session; while active, Bash runs read-only), InvokeSkill (SKILL.md
// folders) and SetCallback (per-session timers delivered through the notice
// queue).
//
// Rules:
//   - files are read and written through machine.go only: readCapped, readState (in STATE_DIR)
//     and listDir; writeState, under STATE_DIR; no lock is held across a file read or write;
//   - tasks.json changes only under an flock on tasks.json.lock, is read again inside the lock
//     and is replaced atomically, through a symlink if it is one; one that does not parse is
//     kept under another name and a new list started, unless it is a symlink: then it is refused;
//     list and pending read it under the flock and answer after it; every action is linear in
//     the file's size;
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
  query narrows both: every word of it, in any case, is in the task's title or steps
  (pending: in the step or its task's title). Empty: no filter.
- switch: make task_id the current task.
Ids are numbers: task 3; its step 2 is step_id 2 (of task_id, else of the current task).`,
	input: `{"type":"object","properties":{
		"action":{"type":"string",
			"enum":["create","add","start","complete","list","pending","switch"]},
		"query":{"type":"string","maxLength":200,
			"description":"The search query: words list and pending filter by (\"\": none)."},
		"task_id":{"type":"integer","minimum":0,"maximum":1000000000,
			"description":"Task id, e.g. 3 (default: the current task)."},
		"step_id":{"type":"integer","minimum":0,"maximum":1000000000,
			"description":"Step id within the task, e.g. 2."},
		"text":{"type":"string","maxLength":500,"description":"Task title (create) or step (add)."},
		"all":{"type":"boolean","description":"list: every project's tasks."},
		"force":{"type":"boolean","description":"complete: close the open steps too."}},
		"required":["action","query"]}`,
	output: `{"type":"object","required":["project","current","tasks","message"],"properties":{
		"project":{"type":"string"},"current":{"type":["integer","null"]},
		"message":{"type":"string"},
		"tasks":{"type":"array","items":{"type":"object","properties":{
			"id":{"type":"integer"},"title":{"type":"string"},"project":{"type":"string"},
			"done":{"type":"boolean"},"created":{"type":"string"},
			"steps":{"type":"array","items":{"type":"object","properties":{
				"id":{"type":"integer"},"text":{"type":"string"},
				"done":{"type":"boolean"},"in_progress":{"type":"boolean"}}}}}}}}}`,
	aliases: taskAliases,
	run:     runTaskManager,
}

const (
	maxTasks     = 200 // when full, create drops the oldest completed task
	maxTaskSteps = 100
	maxTaskFile  = 16 << 20
	tasksFile    = "tasks.json" // in STATE_DIR
)

// taskFile is STATE_DIR/tasks.json. Its ids are strings, "t3" for task 3 and "t3.2" for its
// step 2, as every telson wrote them: the agent sees and sends the numbers.
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
	Query   string
	TaskID  int64 `json:"task_id"` // 0: not given
	StepID  int64 `json:"step_id"` // 0: not given
	Text    string
	All     bool
	Force   bool
	project string
}

// taskParams is each parameter but action, with the actions it is for.
var taskParams = []string{"query list pending", "task_id add start complete pending switch",
	"step_id start complete", "text create add", "all list", "force complete"}

// taskAliases puts in the schema's terms what agents send beside it: the ids telson showed
// before they were numbers ("t3"; "t3.2", step 2 of task 3), "" for no id, and no query: the
// seed declares query required, but only list and pending use it.
func taskAliases(args map[string]any) {
	if args["query"] == nil {
		args["query"] = ""
	}
	if id, ok := args["task_id"].(string); ok {
		args["task_id"] = strings.TrimPrefix(id, "t")
	}
	id, ok := args["step_id"].(string)
	task, step, cut := strings.Cut(strings.TrimPrefix(id, "t"), ".")
	switch {
	case ok && !cut:
		args["step_id"] = task
	case ok && (args["task_id"] == nil || fmt.Sprint(args["task_id"]) == task):
		args["task_id"], args["step_id"] = task, step
	}
	for _, name := range []string{"task_id", "step_id"} {
		if args[name] == "" {
			delete(args, name)
		}
	}
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
	json.Unmarshal(c.args, &a) // schema-checked: every integer is bounded
	if err := unusedParam(c.args, a.Action, taskParams); err != nil {
		return errorResult("%v", err)
	}
	a.Text = strings.TrimSpace(a.Text)
	a.project = projectOf(c.s.shell.dir())
	st := c.s.srv.set.state()
	readOnly := a.Action == "list" || a.Action == "pending"
	var tf *taskFile
	var kept, text string
	var shown []any
	err := withStateLock(ctx, st, tasksFile, func() (err error) {
		tf, kept, err = loadTasks(st)
		if err != nil || readOnly {
			return err // list and pending change nothing: they answer after the lock
		}
		text, shown, err = tf.apply(a)
		if err != nil {
			return err
		}
		removeStaleTemps(st, tasksFile)
		out, _ := json.MarshalIndent(tf, "", "  ")
		return writeState(st, tasksFile, out, true)
	})
	if err == nil && readOnly {
		text, shown, err = tf.apply(a)
	}
	if err != nil {
		return errorResult("%s%v", kept, err)
	}
	text = kept + text
	var current any
	if id := tf.Current[a.project]; id != "" {
		current = taskNum(id)
	}
	return structuredResult(text, map[string]any{"project": a.project,
		"current": current, "tasks": shown, "message": text})
}

// loadTasks reads tasks.json; a missing file is an empty list. A file that does not parse is
// kept under another name and a new list started: kept says so.
func loadTasks(st stateDir) (tf *taskFile, kept string, err error) {
	path, _ := statePath(st, tasksFile) // a name inside STATE_DIR
	data, err := readState(st, filepath.Join(st.path, tasksFile), maxTaskFile)
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
	aside, kerr := keepAside(st, tasksFile)
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
	if err := json.Unmarshal(data, tf); err != nil {
		return nil, err
	}
	for _, t := range tf.Tasks {
		if t == nil || slices.Contains(t.Steps, nil) {
			return nil, errors.New("a task or step is null")
		}
		if taskNum(t.ID) == 0 ||
			slices.ContainsFunc(t.Steps, func(s *taskStep) bool { return t.stepNum(s) == 0 }) {
			return nil, fmt.Errorf("task %q or a step of it has an id telson does not write", t.ID)
		}
	}
	if tf.Current == nil {
		tf.Current = map[string]string{}
	}
	return tf, nil
}

// taskNum is the number of task id "t3", 3; 0 for an id telson does not write.
func taskNum(id string) int {
	n, _ := strconv.Atoi(strings.TrimPrefix(id, "t")) // what it cannot read is not n again
	if n < 1 || "t"+strconv.Itoa(n) != id {
		return 0
	}
	return n
}

// stepNum is the number of s in t: 2 for "t3.2" in task "t3"; 0 for an id telson does not write.
func (t *taskEntry) stepNum(s *taskStep) int {
	return taskNum("t" + strings.TrimPrefix(s.ID, t.ID+"."))
}

// view is t as the agent sees it, ids as numbers, with the steps each word of query is in (or
// in t's title).
func (t *taskEntry) view(query string) map[string]any {
	steps := []any{}
	for _, s := range t.Steps {
		if hasWords(query, t.Title, s.Text) {
			steps = append(steps, map[string]any{"id": t.stepNum(s), "text": s.Text, "done": s.Done,
				"in_progress": s.InProgress})
		}
	}
	return map[string]any{"id": taskNum(t.ID), "title": t.Title, "project": t.Project,
		"done": t.Done, "created": t.Created, "steps": steps}
}

// hasWords reports whether each word of query is in one of texts, in any case.
func hasWords(query string, texts ...string) bool {
	all := strings.ToLower(strings.Join(texts, "\n"))
	for _, w := range strings.Fields(strings.ToLower(query)) {
		if !strings.Contains(all, w) {
			return false
		}
	}
	return true
}

// apply performs one action and returns its reply and the tasks it shows.
func (tf *taskFile) apply(a taskArgs) (string, []any, error) {
	if a.Text == "" && (a.Action == "create" || a.Action == "add") {
		return "", nil, fmt.Errorf("%s needs text: the task's title, or the step", a.Action)
	}
	switch a.Action {
	case "list":
		return tf.list(a)
	case "create":
		if err := tf.create(a); err != nil {
			return "", nil, err
		}
	}
	t, err := tf.find(a) // create made its task the current one
	if err != nil {
		return "", nil, err
	}
	text := ""
	switch a.Action {
	case "create":
		text = fmt.Sprintf("Created task %d %q; it is now the current task.", taskNum(t.ID),
			t.Title)
	case "add":
		text, err = t.add(a.Text)
	case "start", "complete":
		text, err = tf.mark(t, a)
	case "pending":
		open, _ := t.open(a.Query)
		text = "Open steps of task " + t.line() + matching(a.Query) + ":" + open
	case "switch":
		tf.Current[a.project] = t.ID
		text = "Switched to task " + t.line() + "."
	}
	return text, []any{t.view(a.Query)}, err
}

// matching says what query filters by, if anything.
func matching(query string) string {
	if strings.TrimSpace(query) == "" {
		return ""
	}
	return fmt.Sprintf(" matching %q", query)
}

// find is the task task_id names, else the current one.
func (tf *taskFile) find(a taskArgs) (*taskEntry, error) {
	id := tf.Current[a.project]
	if a.TaskID != 0 {
		id = fmt.Sprintf("t%d", a.TaskID)
	}
	if id == "" {
		return nil, fmt.Errorf("no current task in %s: create or switch to one (list shows them)",
			a.project)
	}
	i := slices.IndexFunc(tf.Tasks, func(x *taskEntry) bool { return x.ID == id })
	if i < 0 {
		return nil, fmt.Errorf("no task %d (list shows them)", taskNum(id))
	}
	return tf.Tasks[i], nil
}

// create adds a task titled text to the project's and makes it the current one.
func (tf *taskFile) create(a taskArgs) error {
	if len(tf.Tasks) >= maxTasks {
		i := slices.IndexFunc(tf.Tasks, func(x *taskEntry) bool { return x.Done })
		if i < 0 {
			return fmt.Errorf("the list holds %d open tasks, the most it keeps", maxTasks)
		}
		tf.Tasks = slices.Delete(tf.Tasks, i, i+1) // the oldest completed task
	}
	next := 1
	for _, x := range tf.Tasks {
		next = max(next, taskNum(x.ID)+1)
	}
	t := &taskEntry{ID: "t" + strconv.Itoa(next), Title: a.Text, Project: a.project,
		Created: time.Now().UTC(), Steps: []*taskStep{}}
	tf.Tasks = append(tf.Tasks, t)
	tf.Current[a.project] = t.ID
	return nil
}

func (t *taskEntry) add(text string) (string, error) {
	if len(t.Steps) >= maxTaskSteps {
		return "", fmt.Errorf("task %d has %d steps, the most it keeps", taskNum(t.ID), maxTaskSteps)
	}
	t.Steps = append(t.Steps, &taskStep{ID: fmt.Sprintf("%s.%d", t.ID, len(t.Steps)+1), Text: text})
	t.Done = false
	return fmt.Sprintf("Added step %d to task %s.", len(t.Steps), t.line()), nil
}

// mark starts step_id, the only step of t in progress then, or completes it; complete without
// step_id completes t with its steps, with steps open only if force.
func (tf *taskFile) mark(t *taskEntry, a taskArgs) (string, error) {
	open, n := t.open("")
	done := a.Action == "complete"
	if done && a.StepID == 0 {
		if n > 0 && !a.Force {
			return "", fmt.Errorf("task %d has open steps; complete them, or pass force: true:%s",
				taskNum(t.ID), open)
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
	i := slices.IndexFunc(t.Steps, func(s *taskStep) bool {
		return int64(t.stepNum(s)) == a.StepID
	})
	if i < 0 {
		return "", fmt.Errorf("task %d has no step %d; its open steps:%s", taskNum(t.ID), a.StepID,
			open)
	}
	for _, s := range t.Steps {
		s.InProgress = s.InProgress && done
	}
	s := t.Steps[i]
	s.Done = done
	s.InProgress = !done
	if done {
		return fmt.Sprintf("Completed step %d of task %s.", a.StepID, t.line()), nil
	}
	t.Done = false
	return fmt.Sprintf("Step %d of task %s is in progress.", a.StepID, t.line()), nil
}

// list is the project's tasks (all: every project's) that each word of the query is in.
func (tf *taskFile) list(a taskArgs) (string, []any, error) {
	var text strings.Builder // a reply grows linearly: += would copy it at each task
	text.WriteString("Tasks" + matching(a.Query) + " (* = current):")
	shown := []any{}
	for _, t := range tf.Tasks {
		texts := []string{t.Title}
		for _, s := range t.Steps {
			texts = append(texts, s.Text)
		}
		if t.Project != a.project && !a.All || !hasWords(a.Query, texts...) {
			continue
		}
		mark := "\n  "
		if t.ID == tf.Current[a.project] {
			mark = "\n* "
		}
		text.WriteString(mark + t.line())
		if t.Project != a.project {
			text.WriteString(" in " + t.Project)
		}
		shown = append(shown, t.view(""))
	}
	if len(shown) == 0 {
		return "No tasks" + matching(a.Query) + " in " + a.project +
			". create starts one; all lists every project's.", shown, nil
	}
	return text.String(), shown, nil
}

// open is t's steps not done that each word of query is in (or t's title), a line each, and
// how many there are.
func (t *taskEntry) open(query string) (string, int) {
	var text strings.Builder // a reply grows linearly: += would copy it at each step
	n := 0
	for _, s := range t.Steps {
		if s.Done || !hasWords(query, t.Title, s.Text) {
			continue
		}
		n++
		fmt.Fprintf(&text, "\n- step %d: %s", t.stepNum(s), s.Text)
		if s.InProgress {
			text.WriteString(" (in progress)")
		}
	}
	return cmp.Or(text.String(), " none"), n
}

// line is t on one line: id, title, progress.
func (t *taskEntry) line() string {
	_, open := t.open("")
	s := fmt.Sprintf("%d %q [%d/%d]", taskNum(t.ID), t.Title, len(t.Steps)-open, len(t.Steps))
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
  you can read every file, writes fail (/tmp too: scratch files go to $TMPDIR). Background tasks
  started before keep running outside it: enter and status list them.
- exit: pass the plan as markdown in plan, or write it to the plan file first. An inline plan
  is saved to a new file in STATE_DIR/plans; a plan file you name is read, never written.
  If the client can ask, only the user's approval ends plan mode; they can send you back to
  planning with a note. If it cannot, exit ends it: show the user the plan first.
- status: the state. json: the state as JSON (active, goal, plan_file, started_at, plan,
  approved); after exit, of the plan you left with. reset: leave without a plan.
Plan mode belongs to this connection.`,
	input: `{"type":"object","properties":{
		"action":{"type":"string","enum":["enter","exit","status","json","reset"]},
		"goal":{"type":"string","maxLength":1000,"description":"What the plan is for (enter)."},
		"plan":{"type":"string","maxLength":1048576,"description":"The plan, markdown (exit)."},
		"plan_file":{"type":"string","maxLength":4096,
			"description":"Plan file to read at exit (enter, exit; default: new in STATE_DIR/plans)."}
		},
		"required":["action"]}`,
	output: `{"type":"object","required":["active","goal","plan_file","started_at","plan","approved"],
		"properties":{"active":{"type":"boolean"},"goal":{"type":["string","null"]},
		"plan_file":{"type":["string","null"]},"started_at":{"type":["string","null"]},
		"plan":{"type":["string","null"]},"approved":{"type":"boolean"},
		"message":{"type":"string"},"note":{"type":"string"},
		"tasks_outside":{"type":"array","items":{"type":"integer"},
			"description":"background tasks started before plan mode: running outside it"},
		"approval":{"type":"string","enum":["approved","keep planning","not asked","no answer"]}}}`,
	run: runPlanMode,
}

const (
	maxPlanBytes = 1 << 20
	planApproved = "approved"
	planKeep     = "keep planning"
	planNotAsked = "not asked"
	planNoAnswer = "no answer" // the form failed, was cancelled or timed out: plan mode stays
)

// planApproval is the form that asks the user to approve a plan.
const planApproval = `{"type":"object","required":["decision"],"properties":{
	"decision":{"type":"string","title":"Decision","enum":["approve","keep planning"]},
	"note":{"type":"string","title":"Note for the agent (optional)"}}}`

// planInfo is a session's plan mode. It is replaced whole, never changed, so no lock is held
// across file I/O.
type planInfo struct {
	goal     string
	file     string // the plan file: read at exit without an inline plan
	started  time.Time
	plan     string // the plan exit took, if any
	approval string // how it left plan mode: planApproved or planNotAsked
}

// planState is plan mode's state, the json action's reply: the active plan mode, else the plan
// it was last left with; null and false before either, and after reset.
type planState struct {
	Active    bool `json:"active"`
	Goal      any  `json:"goal"`
	PlanFile  any  `json:"plan_file"`
	StartedAt any  `json:"started_at"` // when that plan mode was entered
	Plan      any  `json:"plan"`       // the plan exit took
	Approved  bool `json:"approved"`   // by the user, through the client's form
}

// planReply is every other action's structured content.
type planReply struct {
	planState
	Message  string `json:"message"`
	Approval string `json:"approval,omitempty"`
	Note     string `json:"note,omitempty"`
	Outside  []int  `json:"tasks_outside,omitempty"`
}

// planParams is each parameter but action, with the actions it is for.
var planParams = []string{"goal enter", "plan exit", "plan_file enter exit"}

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
	if err := unusedParam(c.args, a.Action, planParams); err != nil {
		return errorResult("%v", err)
	}
	w := c.s.workflow
	in := w.plan.Load()
	file := strings.TrimSpace(a.PlanFile)
	switch a.Action {
	case "enter":
		return enterPlan(c, strings.TrimSpace(a.Goal), file)
	case "exit":
		return exitPlan(ctx, c, in, a.Plan, file)
	case "reset":
		text := "Plan mode is not active. Nothing to reset."
		if w.plan.Swap(nil) != nil {
			text = "Plan mode reset. No plan saved."
		}
		w.planLeft.Store(nil)
		return w.planResult(planReply{Message: text})
	case "json":
		state := w.planState()
		b, _ := json.Marshal(state) // strings and booleans encode
		return structuredResult(string(b), state)
	}
	text := "Plan mode: INACTIVE"
	if left := w.planLeft.Load(); left != nil {
		text += fmt.Sprintf("\nLast plan: %s (goal %q; approval: %s)", left.file, left.goal,
			left.approval)
	}
	if in != nil {
		text = fmt.Sprintf("Plan mode: ACTIVE\nGoal: %q\nDuration: %s\nPlan file: %s",
			in.goal, time.Since(in.started).Round(time.Second), in.file)
	}
	return c.s.planOutside(in, text)
}

// planOutside is the reply of status and enter: text, then the session's background tasks that
// plan mode in, when active, does not hold, started before it and still running.
func (s *session) planOutside(in *planInfo, text string) toolResult {
	r := planReply{Message: text}
	list := ""
	for _, t := range s.bg.list() {
		select {
		case <-t.ended:
		default:
			if in != nil && t.start.Before(in.started) {
				r.Outside = append(r.Outside, t.id)
				list += fmt.Sprintf("\n- task %d: %s", t.id, cutRunes(t.command, 80))
			}
		}
	}
	if list != "" {
		r.Message += "\nStarted before plan mode, still running outside it (they can write; " +
			"KillBgTask stops one):" + list
	}
	return s.workflow.planResult(r)
}

// planState is the state now.
func (w *sessionWorkflow) planState() planState {
	active := w.plan.Load()
	in := cmp.Or(active, w.planLeft.Load())
	if in == nil {
		return planState{}
	}
	state := planState{Active: active != nil, Goal: in.goal, PlanFile: in.file,
		StartedAt: in.started.UTC().Format(time.RFC3339), Approved: in.approval == planApproved}
	if in.plan != "" {
		state.Plan = in.plan
	}
	return state
}

// planResult is r with the state now; its message is the text.
func (w *sessionWorkflow) planResult(r planReply) toolResult {
	r.planState = w.planState()
	return structuredResult(r.Message, r)
}

func enterPlan(c *toolCall, goal, file string) toolResult {
	if goal == "" {
		return errorResult("enter needs goal, what the plan is for")
	}
	w := c.s.workflow
	st := c.s.srv.set.state()
	file = c.s.shell.resolve(cmp.Or(file, filepath.Join(st.path, planDir, newPlanName())))
	_, err := readState(st, file, maxPlanBytes)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return errorResult("plan_file: %v", err)
	}
	gate := c.s.srv.served("Bash and BackgroundBash run read-only until you exit: read the " +
		"code, writes fail (scratch files go to $TMPDIR).")
	if !c.s.srv.set.PlanModeStrict {
		gate = "Do not change anything until you exit plan mode."
	}
	text := fmt.Sprintf("Plan mode activated. Write your plan as markdown.\nGoal: %q\n"+
		"Plan file: %s\n%s\nThen exit with {\"action\":\"exit\",\"plan\":\"...\"}.",
		goal, file, gate)
	in := &planInfo{goal: goal, file: file, started: time.Now()}
	for !w.plan.CompareAndSwap(nil, in) {
		if old := w.plan.Load(); old != nil {
			return errorResult("plan mode is already active (goal %q); exit or reset it first",
				old.goal)
		}
	}
	return c.s.planOutside(in, text)
}

// planDir is the folder in STATE_DIR that telson writes plans in.
const planDir = "plans"

// newPlanName names a new plan file in planDir.
func newPlanName() string {
	return time.Now().Format("20060102-150405.000000") + ".md"
}

// take sets in's plan: an inline plan, saved to in's file when that is a new one in
// STATE_DIR/plans, else to a new one there, which in then names; without one, the plan file's.
func (in *planInfo) take(st stateDir, plan string) error {
	in.plan = plan
	if strings.TrimSpace(plan) == "" {
		b, err := readState(st, in.file, maxPlanBytes)
		in.plan = string(b)
		if err == nil && strings.TrimSpace(in.plan) == "" {
			err = fmt.Errorf("plan file %s is empty", in.file)
		}
		return err
	}
	dir := filepath.Join(st.path, planDir)
	name, err := filepath.Rel(dir, in.file)
	if err != nil || !filepath.IsLocal(name) {
		name = newPlanName()
	}
	err = writeState(st, filepath.Join(planDir, name), []byte(plan), false)
	if errors.Is(err, os.ErrExist) {
		name = newPlanName()
		err = writeState(st, filepath.Join(planDir, name), []byte(plan), false)
	}
	in.file = filepath.Join(dir, name)
	return err
}

// exitPlan leaves plan mode with the plan (file, when given, is the plan file), unless the user
// asked for more planning; then plan mode stays, holding the file the plan is in.
// planEnds is the one decision that turns the sandbox off at exit: plan mode ends only with
// the user's approval in the client's form, or with a client that has no form; a refusal, a
// failure or no answer keeps it.
func planEnds(approval string) bool {
	return approval == planApproved || approval == planNotAsked
}

func exitPlan(ctx context.Context, c *toolCall, in *planInfo, plan, file string) toolResult {
	if in == nil {
		return errorResult("plan mode is not active; nothing to exit")
	}
	w := c.s.workflow
	next := *in
	if file != "" {
		next.file = c.s.shell.resolve(file)
	}
	named := next.file
	if err := next.take(c.s.srv.set.state(), plan); err != nil {
		return errorResult("%v. Pass the plan as plan (or reset to leave without one).", err)
	}
	saved := "Plan saved to " + next.file
	if next.file != named {
		saved += " (" + named + " is read, never written)"
	}
	// When the client can show a form, only the user's approval there ends plan mode: a form
	// that fails, is cancelled or gets no answer in time keeps it, and the reply says why.
	approval, note := planNotAsked, ""
	text := "The user wants more planning: plan mode stays active. Revise the plan, exit again."
	if canElicit(c.req) {
		raw, ask, err := elicit(ctx, c, "approve", map[string]any{
			"message":         "Approve this plan?\n\n" + next.plan,
			"requestedSchema": json.RawMessage(planApproval)})
		if ask != nil { // the 2026-07-28 era: the answer comes with the retried call
			w.plan.CompareAndSwap(in, &next)
			return toolResult{inputRequired: ask}
		}
		var r struct {
			Action  string
			Content struct{ Decision, Note string }
		}
		json.Unmarshal(raw, &r) // after an error, or a reply that is no result: no action
		approval, note = planKeep, r.Content.Note
		switch {
		case errors.Is(err, context.DeadlineExceeded):
			err = fmt.Errorf("the user did not answer within %s", c.s.srv.set.AskTimeout)
		case err == nil && !slices.Contains([]string{"accept", "decline", "cancel"}, r.Action):
			err = errors.New("the client's reply is no elicitation result")
		case r.Action == "accept" && r.Content.Decision == "approve":
			approval = planApproved
		}
		if err != nil {
			approval = planNoAnswer
			text = fmt.Sprintf("Plan mode stays active: the plan is not approved (%v). Tell the "+
				"user, then exit again to ask again; if they approve in chat because the form "+
				"cannot reach them, reset leaves plan mode (the plan stays in %s).", err, next.file)
		}
	}
	next.approval = approval
	stay := &next // plan mode stays, with the plan's file
	if planEnds(approval) {
		text = "Exiting plan mode. Returning to execution."
		stay = nil
	}
	if approval == planApproved {
		text = "The user approved the plan. " + text
	}
	if w.plan.CompareAndSwap(in, stay) && stay == nil {
		w.planLeft.Store(&next)
	}
	if note != "" {
		text += "\nNote from the user: " + note
	}
	text = saved + "\n" + text + "\n\n" + next.plan
	return w.planResult(planReply{Message: text, Approval: approval, Note: note})
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
	maxSkillName        = 64        // characters of a skill's name (its folder's)
)

type skillInfo struct{ name, description, source, path string } // path of SKILL.md

// skillSources names a skill's origin by its folder's place in the search order.
var skillSources = []string{"Project Skill", "User Skill", "User Skill", "Additional Skill"}

// scanSkills reads the skills in the skill folders of dir's project, and logs the broken ones.
// Their search order: .claude/skills in the project, ~/.claude/skills, ~/.telson/skills, then
// ADDITIONAL_SKILLS; the first folder holding a name wins.
func (srv *server) scanSkills(dir string) []skillInfo {
	// ADDITIONAL_SKILLS is a comma list; an entry may also be a colon list, as PATH is
	roots := append([]string{projectOf(dir) + "/.claude/skills", "~/.claude/skills",
		"~/.telson/skills"}, filepath.SplitList(strings.Join(srv.set.AdditionalSkills, ":"))...)
	var skills []skillInfo
	for i, root := range roots {
		root = expandHome(root, srv.set.env.home)
		for _, e := range listDir(root, maxSkillsRoot) {
			sk := skillInfo{name: e.Name(), source: skillSources[min(i, 3)],
				path: filepath.Join(root, e.Name(), "SKILL.md")}
			_, err := sk.load()
			switch {
			case errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ENOTDIR):
			case err != nil:
				srv.log.Warn("skills", "err", fmt.Errorf("skipping %s: %w", sk.path, err))
			case !slices.ContainsFunc(skills, func(s skillInfo) bool { return s.name == sk.name }):
				skills = append(skills, sk) // unless an earlier folder has it
			}
		}
	}
	return skills
}

// skillName reports whether name is one InvokeSkill's description may list: a folder's name
// can hold anything (a newline, invisible characters) but a slash. (A regexp with {1,64} took
// 2.5 MB and 2 ms at every start.)
func skillName(name string) bool {
	return utf8.RuneCountInString(name) <= maxSkillName && !strings.ContainsFunc(name,
		func(r rune) bool { return notWordRune(r) && !strings.ContainsRune("._-", r) })
}

// load reads sk's SKILL.md: it sets the description and returns the body.
func (sk *skillInfo) load() (body string, err error) {
	if !skillName(sk.name) {
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
	description: `Reminds you of message after delay_seconds, repeat_count times (default 1),
delay_seconds apart. Use it to check on a deploy, a build or a background task later.
A fired reminder reaches you as "[callback N] <message>" at the top of your next telson tool
result: it cannot wake you while you are idle.
- set (the default): message and delay_seconds are required.
- list: the active reminders (slots 0-7), with the firings left. cancel: slot callback_id,
  or all.`,
	input: `{"type":"object","properties":{
		"action":{"type":"string","enum":["set","list","cancel"]},
		"message":{"type":"string","maxLength":2048,
			"description":"What you are told when it fires."},
		"delay_seconds":{"type":"integer","minimum":1,"maximum":3600,
			"description":"Seconds until it fires, and between firings."},
		"repeat_count":{"type":"integer","minimum":1,"maximum":100,
			"description":"Times to fire before cancel: 1-100, default 1."},
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

// callbackSlot is a reminder; its fields change under callbackSlots.mu.
type callbackSlot struct {
	message string
	delay   time.Duration
	left    int64 // firings left, the next one included
	fireAt  time.Time
	timer   *time.Timer
}

type callbackArgs struct {
	Action       string
	Message      string
	DelaySeconds int64 `json:"delay_seconds"` // 0: not given (the schema's minimum is 1)
	RepeatCount  int64 `json:"repeat_count"`  // 0: not given, once (the schema's minimum is 1)
	CallbackID   int64 `json:"callback_id"`   // -1: not given (the schema's minimum is 0)
}

// callbackParams is each parameter but action, with the actions it is for.
var callbackParams = []string{"message set", "delay_seconds set", "repeat_count set",
	"callback_id cancel"}

// arm puts sl in slot i and starts its timer; the caller holds cb.mu.
func (cb *callbackSlots) arm(i int, sl *callbackSlot) {
	cb.slots[i] = sl
	sl.fireAt = time.Now().Add(sl.delay)
	sl.timer = time.AfterFunc(sl.delay, func() { cb.fire(i, sl) })
}

// fire announces sl, and arms it again while it has firings left.
func (cb *callbackSlots) fire(i int, sl *callbackSlot) {
	cb.mu.Lock()
	mine := cb.slots[i] == sl // not cancelled, and the session goes on
	line := fmt.Sprintf("[callback %d] %s", i, sl.message)
	if mine {
		cb.slots[i] = nil
		sl.left--
		if sl.left > 0 {
			cb.arm(i, sl)
			line += fmt.Sprintf(" (%d more to come; cancel with callback_id %d)", sl.left, i)
		}
	}
	cb.mu.Unlock()
	if mine {
		cb.announce(line)
	}
}

func runSetCallback(ctx context.Context, c *toolCall) toolResult {
	a := callbackArgs{CallbackID: -1}
	json.Unmarshal(c.args, &a) // schema-checked: every integer is bounded
	if err := unusedParam(c.args, cmp.Or(a.Action, "set"), callbackParams); err != nil {
		return errorResult("%v", err)
	}
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
		if sl != nil {
			left := max(time.Until(sl.fireAt), 0).Round(time.Second)
			text += fmt.Sprintf("\n  [%d] %q - fires in %s (%d left)", i, sl.message, left, sl.left)
			n++
		}
	}
	if n == 0 {
		return textResult("No active callbacks.")
	}
	return textResult(fmt.Sprintf("Active callbacks (%d/%d):%s", n, callbackSlotCount, text))
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
		text = "Cancelled 1 callback."
	case id < 0:
		text = fmt.Sprintf("Cancelled %d callbacks.", n)
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
	sl := &callbackSlot{message: a.Message, delay: time.Duration(a.DelaySeconds) * time.Second,
		left: max(a.RepeatCount, 1)}
	cb.arm(i, sl)
	times := fmt.Sprintf("fires in %ds.", a.DelaySeconds)
	if sl.left > 1 {
		times = fmt.Sprintf("fires every %ds, %d times.", a.DelaySeconds, sl.left)
	}
	return textResult(fmt.Sprintf("Callback scheduled in slot %[1]d: %[2]s "+
		`Cancel it with {"action":"cancel","callback_id":%[1]d}.`, i, times))
}

// ---- the parameters an action uses ----

// unusedParam names the first parameter in args that action does not use, so none is
// silently ignored: uses is each parameter with the actions using it. A zero value ("", 0,
// false), which agents fill in, is not one.
func unusedParam(args json.RawMessage, action string, uses []string) error {
	var given map[string]any
	json.Unmarshal(args, &given) // schema-checked
	for _, u := range uses {
		name, actions, _ := strings.Cut(u, " ")
		switch given[name] {
		case nil, "", false, 0.0:
		default:
			if !slices.Contains(strings.Fields(actions), action) {
				return fmt.Errorf("%q does nothing with action %s: leave it out (it is for %s)",
					name, action, strings.ReplaceAll(actions, " ", ", "))
			}
		}
	}
	return nil
}

// ---- the session's workflow state ----

// sessionWorkflow is a session's plan mode and callbacks.
type sessionWorkflow struct {
	plan      atomic.Pointer[planInfo] // nil: plan mode is not active
	planLeft  atomic.Pointer[planInfo] // the plan mode last left with a plan; nil after reset
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
