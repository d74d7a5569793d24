// tools_workflow.go holds the workflow tools: TaskManager (a task list in
// STATE_DIR/tasks.json shared by every telson process), PlanMode (per
// session; while active it refuses shell commands), InvokeSkill (SKILL.md
// folders, also served as MCP prompts) and SetCallback (per-session timers
// delivered through the notice queue).
//
// Rules:
//   - a state file changes only under an flock on <file>.lock, is read again
//     inside the lock and is replaced atomically (temp file, fsync, rename);
//   - a state file that does not parse is never overwritten: every action
//     fails naming it until an explicit create moves it aside as
//     <file>.corrupt-<time> and starts a new one;
//   - callback timers go through callbackSlots.afterFunc, so tests drive them;
//   - the skill catalog is re-read only when a skill folder or SKILL.md changes.
package main

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
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

// withStateLock runs fn holding an exclusive flock on path+".lock". It gives
// up after 5 s, so a stuck process cannot hang a tool call.
func withStateLock(ctx context.Context, path string, fn func() error) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("lock: %w", err)
	}
	f, err := os.OpenFile(path+".lock", os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return fmt.Errorf("lock: %w", err)
	}
	defer f.Close() // closing releases the flock
	// Holders keep the lock for milliseconds, so polling is cheap.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		switch err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); {
		case err == nil:
			return fn()
		case !errors.Is(err, syscall.EWOULDBLOCK):
			return fmt.Errorf("lock %s.lock: %w", path, err)
		case ctx.Err() != nil || time.Now().After(deadline):
			return fmt.Errorf("lock %s.lock: another process holds it; try again", path)
		}
	}
}

// writeFileAtomic replaces path with data: temp file in the same folder, fsync, rename.
func writeFileAtomic(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer os.Remove(tmp.Name()) // fails harmlessly after the rename
	_, err = tmp.Write(data)
	if err = errors.Join(err, tmp.Sync(), tmp.Close()); err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if d, err := os.Open(filepath.Dir(path)); err == nil { // makes the rename durable
		d.Sync()
		d.Close()
	}
	return nil
}

// ---- TaskManager ----

var taskManagerTool = toolDef{
	name:  "TaskManager",
	title: "Keep a persistent task list",
	description: `Keeps a task list with steps that persists across sessions and restarts (shared by every telson on this machine).

- create: start a task named text; it becomes the current task. Task ids are t1, t2, ...
- add: add step text to task_id, or to the current task. Step ids are t1.1, t1.2, ...
- complete: mark step_id done (t1.2, or just 2 for the current task or task_id); without step_id, complete the whole task.
- list: every task with progress (done/total), the current one marked *. pending: open steps of the current task (or task_id).
- switch: make task_id the current task. query: an optional case-insensitive filter for list and pending.
Limits: 200 tasks (when full, create drops the oldest completed task), 100 steps a task, 500 characters of text.

Example: {"action": "add", "text": "write the migration"}`,
	input: `{"type":"object","properties":{
		"action":{"type":"string","enum":["create","add","complete","list","pending","switch"],"description":"What to do."},
		"task_id":{"type":"string","maxLength":40,"description":"A task id such as t3 (default: the current task)."},
		"step_id":{"type":"string","maxLength":40,"description":"A step id such as t3.2 (or 2 for a step of the current task)."},
		"text":{"type":"string","maxLength":500,"description":"Task title for create, step text for add."},
		"query":{"type":"string","maxLength":200,"description":"The search query: optional case-insensitive filter for list and pending."}},
		"required":["action"],"additionalProperties":false}`,
	output: `{"type":"object","required":["current","tasks"],"properties":{"current":{"type":["string","null"]},
		"tasks":{"type":"array","items":{"type":"object","required":["id","title","done","steps_done","steps_total"],"properties":{
			"id":{"type":"string"},"title":{"type":"string"},"done":{"type":"boolean"},"steps_done":{"type":"integer"},"steps_total":{"type":"integer"},
			"steps":{"type":"array","items":{"type":"object","required":["id","text","done"],"properties":{"id":{"type":"string"},"text":{"type":"string"},"done":{"type":"boolean"}}}}}}}}}`,
	run: runTaskManager,
}

const (
	maxTasks     = 200 // when full, create drops the oldest completed task
	maxTaskSteps = 100
)

// taskFile is STATE_DIR/tasks.json.
type taskFile struct {
	Rev     int64        `json:"rev"`
	Current string       `json:"current"`
	NextID  int          `json:"next_id"`
	Tasks   []*taskEntry `json:"tasks"`
}

type taskEntry struct {
	ID       string      `json:"id"`
	Title    string      `json:"title"`
	Done     bool        `json:"done"`
	Created  time.Time   `json:"created"`
	NextStep int         `json:"next_step"`
	Steps    []*taskStep `json:"steps"`
}

type taskStep struct {
	ID   string `json:"id"`
	Text string `json:"text"`
	Done bool   `json:"done"`
}

type taskArgs struct {
	Action string `json:"action"`
	TaskID string `json:"task_id"`
	StepID string `json:"step_id"`
	Text   string `json:"text"`
	Query  string `json:"query"`
}

func runTaskManager(ctx context.Context, c *toolCall) toolResult {
	var a taskArgs
	json.Unmarshal(c.args, &a) // schema-checked: every field is a string
	a.TaskID, a.StepID, a.Text, a.Query = strings.TrimSpace(a.TaskID), strings.TrimSpace(a.StepID), strings.TrimSpace(a.Text), strings.TrimSpace(a.Query)
	path := filepath.Join(c.s.srv.cfg.str("STATE_DIR"), "tasks.json")
	var res toolResult
	err := withStateLock(ctx, path, func() error {
		tf, note := &taskFile{NextID: 1}, ""
		data, err := os.ReadFile(path)
		switch {
		case errors.Is(err, os.ErrNotExist):
			err = nil
		case err != nil:
			return fmt.Errorf("read %s: %w", path, err)
		default:
			err = errors.Join(json.Unmarshal(data, tf), tf.check())
		}
		if err != nil && (a.Action != "create" || a.Text == "") {
			res = errorResult("TaskManager: %s is corrupt (%v); it was left untouched. Fix or move the file, or call {\"action\":\"create\",\"text\":\"...\"} to start a new list (the old file is then kept as %s.corrupt-<time>).", path, err, path)
			return nil
		} else if err != nil {
			backup := path + ".corrupt-" + time.Now().UTC().Format("20060102T150405.000Z")
			if err := os.Rename(path, backup); err != nil {
				return fmt.Errorf("keep corrupt file: %w", err)
			}
			tf, note = &taskFile{NextID: 1}, fmt.Sprintf("%s was corrupt; it is kept as %s and a new list was started.\n", path, backup)
		}
		res = tf.apply(a)
		res.content[0].Text = note + res.content[0].Text
		if res.isError || a.Action == "list" || a.Action == "pending" {
			return nil // the list is unchanged
		}
		tf.Rev++
		out, _ := json.MarshalIndent(tf, "", "  ")
		return writeFileAtomic(path, append(out, '\n'))
	})
	if err != nil {
		return errorResult("TaskManager: %v", err)
	}
	return res
}

// check rejects entries apply cannot use and makes sure new ids are unused.
func (tf *taskFile) check() error {
	for _, t := range tf.Tasks {
		if t == nil || t.ID == "" || slices.Contains(t.Steps, nil) {
			return errors.New("a task or step is null or has no id")
		}
		n, _ := strconv.Atoi(strings.TrimPrefix(t.ID, "t"))
		tf.NextID = max(tf.NextID, n+1)
		for _, s := range t.Steps {
			n, _ := strconv.Atoi(s.ID[strings.LastIndexByte(s.ID, '.')+1:])
			t.NextStep = max(t.NextStep, n+1)
		}
	}
	return nil
}

func (tf *taskFile) ids() string {
	var ids []string
	for _, t := range tf.Tasks {
		ids = append(ids, t.ID)
	}
	return cmp.Or(strings.Join(ids, ", "), "none yet")
}

// line is t on one line: id, title, progress.
func (t *taskEntry) line() string {
	s := fmt.Sprintf("%s %q [%d/%d]", t.ID, t.Title, t.view(nil)["steps_done"], len(t.Steps))
	if t.Done {
		s += " done"
	}
	return s
}

// view is t as structured content, with the steps keep accepts (none when keep is nil).
func (t *taskEntry) view(keep func(*taskStep) bool) map[string]any {
	d, steps := 0, []*taskStep{}
	for _, s := range t.Steps {
		if s.Done {
			d++
		}
		if keep != nil && keep(s) {
			steps = append(steps, s)
		}
	}
	m := map[string]any{"id": t.ID, "title": t.Title, "done": t.Done, "steps_done": d, "steps_total": len(t.Steps)}
	if keep != nil {
		m["steps"] = steps
	}
	return m
}

func containsFold(s, sub string) bool {
	return strings.Contains(strings.ToLower(s), strings.ToLower(sub))
}

// apply performs one action; an error result leaves the list unchanged.
func (tf *taskFile) apply(a taskArgs) toolResult {
	var t *taskEntry
	if a.Action != "create" && a.Action != "list" { // the others act on one task
		id := a.TaskID
		if before, _, ok := strings.Cut(a.StepID, "."); ok && id == "" && a.Action == "complete" {
			id = before
		}
		switch {
		case id == "" && a.Action == "switch":
			return errorResult("TaskManager: switch needs task_id (tasks: %s)", tf.ids())
		case id == "" && tf.Current == "":
			return errorResult("TaskManager: no current task; create one or switch to one (tasks: %s)", tf.ids())
		}
		id = cmp.Or(id, tf.Current)
		i := slices.IndexFunc(tf.Tasks, func(x *taskEntry) bool { return strings.EqualFold(x.ID, id) })
		if i < 0 {
			return errorResult("TaskManager: no task %q (tasks: %s)", id, tf.ids())
		}
		t = tf.Tasks[i]
	}
	var text string
	views, keep := []map[string]any{}, func(*taskStep) bool { return true }
	switch a.Action {
	case "create":
		if a.Text == "" {
			return errorResult("TaskManager: create needs text, the task's title")
		}
		if len(tf.Tasks) >= maxTasks {
			i := slices.IndexFunc(tf.Tasks, func(x *taskEntry) bool { return x.Done })
			if i < 0 {
				return errorResult("TaskManager: the list holds %d open tasks, the most it keeps; complete some first", maxTasks)
			}
			text = fmt.Sprintf("(The list was full: completed task %s was dropped.)\n", tf.Tasks[i].line())
			tf.Tasks = slices.Delete(tf.Tasks, i, i+1)
		}
		t = &taskEntry{ID: "t" + strconv.Itoa(tf.NextID), Title: a.Text, Created: time.Now().UTC(), NextStep: 1, Steps: []*taskStep{}}
		tf.NextID, tf.Tasks, tf.Current = tf.NextID+1, append(tf.Tasks, t), t.ID
		text += fmt.Sprintf("Created task %s %q; it is now the current task. Add steps with {\"action\":\"add\",\"text\":\"...\"}.", t.ID, t.Title)
	case "add":
		if a.Text == "" {
			return errorResult("TaskManager: add needs text, the step to add")
		}
		if len(t.Steps) >= maxTaskSteps {
			return errorResult("TaskManager: task %s already has %d steps, the most it keeps", t.ID, maxTaskSteps)
		}
		s := &taskStep{ID: fmt.Sprintf("%s.%d", t.ID, t.NextStep), Text: a.Text}
		t.NextStep, t.Steps, t.Done = t.NextStep+1, append(t.Steps, s), false
		text = fmt.Sprintf("Added step %s to task %s.", s.ID, t.line())
	case "complete":
		if a.StepID == "" {
			text = fmt.Sprintf("Task %s was already completed.", t.ID)
			if !t.Done {
				for _, s := range t.Steps {
					s.Done = true
				}
				t.Done = true
				text = fmt.Sprintf("Completed task %s.", t.line())
			}
			if tf.Current == t.ID {
				tf.Current = ""
				text += " There is no current task now; create one or switch to one."
			}
			break
		}
		i := slices.IndexFunc(t.Steps, func(s *taskStep) bool {
			return strings.EqualFold(s.ID, a.StepID) || strings.EqualFold(s.ID, t.ID+"."+a.StepID) // t1.2, or 2 of task t1
		})
		if i < 0 {
			return errorResult("TaskManager: task %s has no step %q (it has %d steps; pending lists the open ones)", t.ID, a.StepID, len(t.Steps))
		}
		text = fmt.Sprintf("Step %s was already completed.", t.Steps[i].ID)
		if !t.Steps[i].Done {
			t.Steps[i].Done = true
			text = fmt.Sprintf("Completed step %s of task %s.", t.Steps[i].ID, t.line())
		}
	case "list":
		text = "Tasks (* = current):"
		for _, x := range tf.Tasks {
			match := a.Query == "" || containsFold(x.Title, a.Query) || containsFold(x.ID, a.Query) ||
				slices.ContainsFunc(x.Steps, func(s *taskStep) bool { return containsFold(s.Text, a.Query) })
			if mark := "\n  "; match {
				if x.ID == tf.Current {
					mark = "\n* "
				}
				text += mark + x.line()
				views = append(views, x.view(nil))
			}
		}
		if len(tf.Tasks) == 0 {
			text = "No tasks yet. Start one with {\"action\":\"create\",\"text\":\"...\"}."
		} else if len(views) == 0 {
			text += fmt.Sprintf("\n(no task matches %q)", a.Query)
		}
	case "pending":
		keep = func(s *taskStep) bool { return !s.Done && (a.Query == "" || containsFold(s.Text, a.Query)) }
		text = fmt.Sprintf("Open steps of task %s:", t.line())
		for _, s := range t.Steps {
			if keep(s) {
				text += fmt.Sprintf("\n- %s %s", s.ID, s.Text)
			}
		}
		if !slices.ContainsFunc(t.Steps, keep) {
			text = fmt.Sprintf("No open steps in task %s.", t.line())
		}
	case "switch":
		tf.Current, text = t.ID, "Switched to task "+t.line()+"."
	}
	if t != nil {
		views = append(views, t.view(keep))
	}
	var cur any
	if tf.Current != "" {
		cur = tf.Current
	}
	return toolResult{content: []contentItem{{Type: "text", Text: text}}, structured: map[string]any{"current": cur, "tasks": views}}
}

// ---- PlanMode ----

var planModeTool = toolDef{
	name:  "PlanMode",
	title: "Plan before acting",
	description: `Plan mode: think and write a plan before changing anything.

- enter (goal required): plan mode starts. Write your plan as markdown to the plan file the reply names (default: a new file under STATE_DIR/plans named after the goal; plan_file picks another). While plan mode is active, Bash, BackgroundBash and KillBgTask refuse to run.
- exit: the plan file must exist and have changed since enter; returns the plan and leaves plan mode.
- status: active or not, goal, duration, plan file. json: {active, goal, plan_file, started_at}. reset: leave without a plan.
Plan mode belongs to this connection: a new session starts outside it. Plan files stay on disk.

Example: {"action": "enter", "goal": "move the config loader to its own package"}`,
	input: `{"type":"object","properties":{
		"action":{"type":"string","enum":["enter","exit","status","json","reset"],"description":"What to do."},
		"goal":{"type":"string","maxLength":1000,"description":"What the plan is for (enter)."},
		"plan_file":{"type":"string","maxLength":4096,"description":"Markdown file for the plan (enter). Relative paths use the shell's working directory."}},
		"required":["action"],"additionalProperties":false}`,
	output: `{"type":"object","required":["active","goal","plan_file","started_at"],"properties":{"active":{"type":"boolean"},
		"goal":{"type":["string","null"]},"plan_file":{"type":["string","null"]},"started_at":{"type":["string","null"]},"plan":{"type":"string"}}}`,
	run: runPlanMode,
}

var nonSlug = regexp.MustCompile(`[^a-z0-9]+`)

// planState is a session's plan mode.
type planState struct {
	mu      sync.Mutex // guards the fields below
	active  bool
	goal    string
	file    string
	started time.Time
	hash    [32]byte // of the plan file's content at enter (a missing file hashes as empty)
}

// planGate refuses tool while plan mode is active and PLAN_MODE_STRICT is on.
func (s *session) planGate(tool string) (toolResult, bool) {
	p := s.workflow.plan
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.active || !s.srv.cfg.bool("PLAN_MODE_STRICT") {
		return toolResult{}, false
	}
	return errorResult("%s: refused: plan mode is active (goal: %q). Finish planning first: write the plan to %s, then call PlanMode with {\"action\":\"exit\"} (or {\"action\":\"reset\"} to leave without a plan).", tool, p.goal, p.file), true
}

func runPlanMode(ctx context.Context, c *toolCall) toolResult {
	var a struct {
		Action   string `json:"action"`
		Goal     string `json:"goal"`
		PlanFile string `json:"plan_file"`
	}
	json.Unmarshal(c.args, &a) // schema-checked: every field is a string
	a.Goal, a.PlanFile = strings.TrimSpace(a.Goal), strings.TrimSpace(a.PlanFile)
	p := c.s.workflow.plan
	p.mu.Lock()
	defer p.mu.Unlock()
	var text, plan string
	switch a.Action {
	case "enter":
		if p.active {
			return errorResult("PlanMode: plan mode is already active (goal: %q, plan file %s); exit or reset it first", p.goal, p.file)
		}
		if a.Goal == "" {
			return errorResult("PlanMode: enter needs goal, what the plan is for")
		}
		file := c.s.shell.resolve(a.PlanFile)
		if a.PlanFile == "" {
			dir := filepath.Join(c.s.srv.cfg.str("STATE_DIR"), "plans")
			if err := os.MkdirAll(dir, 0o700); err != nil {
				return errorResult("PlanMode: %v", err)
			}
			slug := strings.Trim(nonSlug.ReplaceAllString(strings.ToLower(a.Goal), "-"), "-")
			slug = cmp.Or(strings.TrimRight(slug[:min(len(slug), 60)], "-"), "plan")
			file = filepath.Join(dir, slug+".md")
			for n := 2; ; n++ { // a new file each time: never a stale plan
				if _, err := os.Lstat(file); errors.Is(err, os.ErrNotExist) {
					break
				}
				file = filepath.Join(dir, fmt.Sprintf("%s-%d.md", slug, n))
			}
		} else if fi, err := os.Stat(file); err == nil && fi.IsDir() {
			return errorResult("PlanMode: plan_file %s is a directory", file)
		}
		b, _ := os.ReadFile(file)
		p.active, p.goal, p.file, p.started, p.hash = true, a.Goal, file, time.Now(), sha256.Sum256(b)
		gate := "Bash, BackgroundBash and KillBgTask are refused until you exit plan mode."
		if !c.s.srv.cfg.bool("PLAN_MODE_STRICT") {
			gate = "Do not change anything until you exit plan mode."
		}
		text = fmt.Sprintf("Plan mode activated. Write your plan as markdown.\nGoal: %q\nPlan file: %s\n%s", p.goal, p.file, gate)
	case "exit":
		if !p.active {
			return errorResult("PlanMode: plan mode is not active; nothing to exit")
		}
		if fi, err := os.Stat(p.file); err == nil && fi.Size() > 16<<20 {
			return errorResult("PlanMode: plan file %s is too large (%d bytes)", p.file, fi.Size())
		}
		b, err := os.ReadFile(p.file)
		switch {
		case err != nil:
			return errorResult("PlanMode: %v. Write your plan to %s first, or reset to leave without a plan.", err, p.file)
		case strings.TrimSpace(string(b)) == "" || sha256.Sum256(b) == p.hash:
			return errorResult("PlanMode: plan file %s is empty or has not changed since plan mode began. Write your plan there first, or reset to leave without a plan.", p.file)
		}
		plan = string(b)
		if limit := c.s.srv.cfg.int("OUTPUT_LIMIT"); len(plan) > limit && limit > 0 {
			plan = strings.ToValidUTF8(plan[:limit], "") + fmt.Sprintf("\n[plan cut at %d of %d bytes; read the file for the rest]", limit, len(b))
		}
		p.active = false
		text = fmt.Sprintf("Plan saved to %s\nExiting plan mode. Returning to execution.\n\n%s", p.file, plan)
	case "status":
		text = "Plan mode: INACTIVE"
		if d := time.Since(p.started); p.active {
			text = fmt.Sprintf("Plan mode: ACTIVE\nGoal: %q\nDuration: %dm %ds\nPlan file: %s", p.goal, int(d.Minutes()), int(d.Seconds())%60, p.file)
		}
	case "reset":
		text = "Plan mode reset. No plan saved."
		if !p.active {
			text = "Plan mode is not active. Nothing to reset."
		}
		p.active = false
	}
	v := map[string]any{"active": p.active, "goal": nil, "plan_file": nil, "started_at": nil}
	if p.active {
		v["goal"], v["plan_file"], v["started_at"] = p.goal, p.file, p.started.UTC().Format(time.RFC3339)
	}
	if a.Action == "exit" {
		v["plan"] = plan
	} else if a.Action == "json" {
		b, _ := marshalJSON(v)
		text = string(b)
	}
	return toolResult{content: []contentItem{{Type: "text", Text: text}}, structured: v}
}

// ---- skills: InvokeSkill and MCP prompts ----

var invokeSkillTool = toolDef{
	name:  "InvokeSkill",
	title: "Load a skill",
	describe: func(srv *server) string {
		_, _, listing := srv.skills.refresh(srv, "")
		return `Invoke or load a skill by name. Returns the skill content for you to follow or use as context.
The reply is a header line (skill, source, path), the skill's text with the arguments filled in ($ARGUMENTS; $ARGUMENTS[N] and $N are 0-based words split like a shell; with no placeholder the arguments are appended), then the other files in the skill's folder.
Example: {"skill_name": "release-notes", "arguments": "v2.3.0"}

Available skills:
` + listing
	},
	input: `{"type":"object","properties":{
		"skill_name":{"type":"string","minLength":1,"maxLength":200,"description":"The skill's name, as listed."},
		"arguments":{"type":"string","maxLength":20000,"description":"Arguments for the skill: they fill $ARGUMENTS, and $ARGUMENTS[N] / $N (0-based words, split like a shell)."}},
		"required":["skill_name"],"additionalProperties":false}`,
	hints: toolHints{readOnly: true, idempotent: true},
	run:   runInvokeSkill,
}

type skillInfo struct{ name, description, hint, source, path string } // path of SKILL.md

// skillCatalog is the skills found on disk, re-read when the folders change.
type skillCatalog struct {
	mu      sync.Mutex // guards the fields below
	dir     string     // project directory of the last scan
	sig     string     // fingerprint of the folders at the last scan
	gen     int64      // bumped each time the listing changes
	skills  []skillInfo
	listing string
}

// skillRoots lists the skill folders in search order; the first holding a
// name wins. The project's folder is .claude/skills, or .agents/skills, in the
// shell's directory or the nearest parent below home that has one.
func skillRoots(cfg *config, project string) []skillInfo {
	home, herr := os.UserHomeDir()
	roots := []skillInfo{{path: filepath.Join(project, ".claude", "skills"), source: "Project Skill"}}
findProject:
	for d, prev := project, ""; d != home && d != prev; d, prev = filepath.Dir(d), d {
		for _, p := range []string{filepath.Join(d, ".claude", "skills"), filepath.Join(d, ".agents", "skills")} {
			if fi, err := os.Stat(p); err == nil && fi.IsDir() {
				roots[0].path = p
				break findProject
			}
		}
	}
	if herr == nil {
		roots = append(roots, skillInfo{path: filepath.Join(home, ".claude", "skills"), source: "User Skill"},
			skillInfo{path: filepath.Join(home, ".telson", "skills"), source: "User Skill"})
	}
	for _, d := range strings.FieldsFunc(cfg.str("ADDITIONAL_SKILLS"), func(r rune) bool { return r == ',' || r == os.PathListSeparator }) {
		if d = strings.TrimSpace(d); strings.HasPrefix(d, "~/") && herr == nil {
			d = filepath.Join(home, d[2:])
		}
		if d != "" {
			roots = append(roots, skillInfo{path: d, source: "Additional Skill"})
		}
	}
	return roots
}

// refresh re-reads the skills when the project ("" for the last one) or a
// folder changed, and returns the listing's generation, skills and text.
func (sc *skillCatalog) refresh(srv *server, project string) (int64, []skillInfo, string) {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	project = cmp.Or(project, sc.dir)
	var sig, list strings.Builder
	var found []skillInfo
	for _, r := range skillRoots(srv.cfg, project) {
		entries, _ := os.ReadDir(r.path)
		fmt.Fprintf(&sig, "%s %d\n", r.path, len(entries))
		for _, e := range entries[:min(len(entries), 1000)] {
			p := filepath.Join(r.path, e.Name(), "SKILL.md")
			if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
				fmt.Fprintf(&sig, "%s %d %d\n", p, fi.ModTime().UnixNano(), fi.Size())
				found = append(found, skillInfo{name: e.Name(), source: r.source, path: p})
			}
		}
	}
	if sig.String() == sc.sig {
		return sc.gen, sc.skills, sc.listing
	}
	sc.dir, sc.sig, sc.skills = project, sig.String(), nil
	var skipped string
	for _, f := range found {
		if slices.ContainsFunc(sc.skills, func(s skillInfo) bool { return s.name == f.name }) {
			continue // an earlier folder has it
		}
		b, err := os.ReadFile(f.path)
		meta, _, perr := parseSkill(string(b))
		switch {
		case err != nil || perr != nil:
			err = cmp.Or(err, perr)
		case len(b) > 256<<10:
			err = errors.New("larger than 256 KiB")
		case meta["name"] != "" && meta["name"] != f.name:
			err = fmt.Errorf("name %q differs from its folder's", meta["name"])
		case meta["description"] == "":
			err = errors.New("no description")
		}
		if err != nil {
			srv.log.warnf("skills: skipping %s: %v", f.path, err)
			skipped += fmt.Sprintf("(skipped %s: %v)\n", f.path, err)
			continue
		}
		f.description, f.hint = meta["description"], meta["argument-hint"]
		sc.skills = append(sc.skills, f)
	}
	slices.SortFunc(sc.skills, func(a, b skillInfo) int { return strings.Compare(a.name, b.name) })
	for _, sk := range sc.skills[:min(len(sc.skills), 200)] {
		d := []rune(strings.Join(strings.Fields(sk.description), " "))
		fmt.Fprintf(&list, "- %s: %s\n", sk.name, string(d[:min(len(d), 250)]))
	}
	if len(sc.skills) > 200 {
		fmt.Fprintf(&list, "(+%d more skills not listed; prompts/list names them all)\n", len(sc.skills)-200)
	} else if len(sc.skills) == 0 {
		list.WriteString("(none found)\n")
	}
	list.WriteString(skipped + "Skill folders, in search order: .claude/skills (or .agents/skills) in the shell's directory or its nearest parent having one, ~/.claude/skills, ~/.telson/skills, then ADDITIONAL_SKILLS.")
	if list.String() != sc.listing {
		sc.listing, sc.gen = list.String(), sc.gen+1
	}
	return sc.gen, sc.skills, sc.listing
}

// parseSkill splits SKILL.md into front matter (key: value lines, with
// quoted, continued and block scalars) and body.
func parseSkill(text string) (map[string]string, string, error) {
	lines := strings.Split(strings.ReplaceAll(strings.TrimPrefix(text, "\ufeff"), "\r\n", "\n"), "\n")
	end := slices.IndexFunc(lines[min(1, len(lines)):], func(l string) bool { return strings.TrimRight(l, " \t") == "---" }) + 1
	if strings.TrimSpace(lines[0]) != "---" || end == 0 {
		return nil, "", errors.New("broken front matter: the file must start with a --- line and the front matter end with one")
	}
	meta, key, sep := map[string]string{}, "", "" // sep joins key's indented lines; "" drops them
	for i := 1; i < end; i++ {
		line, t := lines[i], strings.TrimSpace(lines[i])
		if t == "" || t[0] == '#' {
			continue
		} else if line[0] == ' ' || line[0] == '\t' { // a value continued, or a nested list (not used)
			if sep != "" { // a block's first line needs no sep: values never start with one
				meta[key] = strings.TrimPrefix(meta[key]+sep+t, sep)
			}
			continue
		}
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			return nil, "", fmt.Errorf("broken front matter: line %d is not key: value", i+1)
		}
		key, v, sep = strings.TrimSpace(k), strings.TrimSpace(v), " "
		switch {
		case v == "":
			sep = ""
		case (v[0] == '>' || v[0] == '|') && strings.Trim(v[1:], "+-") == "": // a block scalar: folded or literal
			v, sep = "", map[byte]string{'>': " ", '|': "\n"}[v[0]]
		case v[0] == '"' || v[0] == '\'':
			if len(v) < 2 || v[len(v)-1] != v[0] {
				return nil, "", fmt.Errorf("broken front matter: line %d has an unterminated quote", i+1)
			}
			if u, err := strconv.Unquote(v); v[0] == '"' && err == nil {
				v = u
			} else {
				v = strings.ReplaceAll(v[1:len(v)-1], "''", "'")
			}
			sep = ""
		}
		meta[key] = v
	}
	return meta, strings.TrimLeft(strings.Join(lines[end+1:], "\n"), "\n"), nil
}

var skillPlaceholder = regexp.MustCompile(`\$\{CLAUDE_SKILL_DIR\}|\$ARGUMENTS\[(\d+)\]|\$ARGUMENTS|\$(\d+)`)

// expandSkill fills body's placeholders from args; with none, non-empty args are appended.
func expandSkill(body, args, dir string) string {
	words, used := shellWords(args), false
	out := skillPlaceholder.ReplaceAllStringFunc(body, func(m string) string {
		if m == "${CLAUDE_SKILL_DIR}" {
			return dir
		}
		used = true
		sub := skillPlaceholder.FindStringSubmatch(m)
		if n, err := strconv.Atoi(sub[1] + sub[2]); err != nil {
			return args
		} else if n < len(words) {
			return words[n]
		}
		return ""
	})
	if !used && strings.TrimSpace(args) != "" {
		out = strings.TrimRight(out, "\n") + "\n\nARGUMENTS: " + args
	}
	return out
}

var (
	shellWord    = regexp.MustCompile(`(?s)(?:"(?:[^"\\]|\\.)*"|'[^']*'|\\.|[^\s"'\\])+`) // quoted parts, escapes and plain characters
	shellPart    = regexp.MustCompile(`(?s)"((?:[^"\\]|\\.)*)"|'([^']*)'|\\(.)`)          // "double", 'single' or \x
	shellEscaped = regexp.MustCompile(`(?s)\\(.)`)
)

// shellWords splits s like a shell: blanks separate words, quotes group, a backslash escapes.
func shellWords(s string) []string {
	words := shellWord.FindAllString(s, -1)
	for i, w := range words {
		words[i] = shellPart.ReplaceAllStringFunc(w, func(part string) string {
			m := shellPart.FindStringSubmatch(part)
			return shellEscaped.ReplaceAllString(m[1], "$1") + m[2] + m[3]
		})
	}
	return words
}

// checkSkills re-reads the catalog for the shell's directory, tells the client
// when the listing changed since this session last knew it, and returns the skills.
func (s *session) checkSkills() []skillInfo {
	gen, skills, _ := s.srv.skills.refresh(s.srv, s.shell.dir())
	if s.workflow.skillGen.Swap(gen) != gen {
		s.notify("notifications/tools/list_changed", nil)
		s.notify("notifications/prompts/list_changed", nil)
	}
	return skills
}

// loadSkill finds name and returns it with its expanded text, or an error naming the closest skills.
func (s *session) loadSkill(name, args string) (skillInfo, string, error) {
	skills := s.checkSkills()
	i := slices.IndexFunc(skills, func(sk skillInfo) bool { return sk.name == name })
	if i < 0 && len(skills) == 0 {
		return skillInfo{}, "", fmt.Errorf("skill %q not found: no skills are available", name)
	} else if i < 0 {
		var names []string
		for _, sk := range skills {
			names = append(names, sk.name)
		}
		dist := func(n string) int { return editDistance(strings.ToLower(n), strings.ToLower(name)) }
		slices.SortStableFunc(names, func(a, b string) int { return dist(a) - dist(b) })
		return skillInfo{}, "", fmt.Errorf("skill %q not found; closest: %s (the tool's description lists them all)", name, strings.Join(names[:min(3, len(names))], ", "))
	}
	b, err := os.ReadFile(skills[i].path)
	_, body, perr := parseSkill(string(b))
	if err = cmp.Or(err, perr); err != nil {
		return skills[i], "", fmt.Errorf("skill %s: %s: %w", name, skills[i].path, err)
	}
	return skills[i], expandSkill(body, args, filepath.Dir(skills[i].path)), nil
}

// editDistance is the Levenshtein distance between a and b, in bytes.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := append(make([]int, 0, len(b)+1), i)
		for j := 1; j <= len(b); j++ {
			subst := prev[j-1]
			if a[i-1] != b[j-1] {
				subst++
			}
			cur = append(cur, min(prev[j]+1, cur[j-1]+1, subst))
		}
		prev = cur
	}
	return prev[len(b)]
}

func runInvokeSkill(ctx context.Context, c *toolCall) toolResult {
	var a struct {
		SkillName string `json:"skill_name"`
		Arguments string `json:"arguments"`
	}
	json.Unmarshal(c.args, &a) // schema-checked: every field is a string
	sk, text, err := c.s.loadSkill(strings.TrimSpace(a.SkillName), a.Arguments)
	if err != nil {
		return errorResult("InvokeSkill: %v", err)
	}
	text = fmt.Sprintf("[skill: %s | %s | path: %s]\n\n%s", sk.name, sk.source, sk.path, strings.TrimRight(text, "\n"))
	var files []string
	dir := filepath.Dir(sk.path)
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if rel, _ := filepath.Rel(dir, p); err == nil && !d.IsDir() && rel != "SKILL.md" {
			files = append(files, "- "+rel)
		}
		if len(files) >= 50 {
			return filepath.SkipAll
		}
		return nil
	})
	if len(files) > 0 {
		text += fmt.Sprintf("\n\nOther files in %s (at most 50 listed):\n%s", dir, strings.Join(files, "\n"))
	}
	return textResult(text)
}

func handlePromptsList(ctx context.Context, r *rpcRequest) (map[string]any, error) {
	prompts := []map[string]any{}
	for _, sk := range r.s.checkSkills() {
		prompts = append(prompts, map[string]any{"name": sk.name, "description": sk.description, "arguments": []map[string]any{
			{"name": "arguments", "description": cmp.Or(sk.hint, "Arguments for the skill ($ARGUMENTS)"), "required": false}}})
	}
	return map[string]any{"prompts": prompts}, nil
}

func handlePromptsGet(ctx context.Context, r *rpcRequest) (map[string]any, error) {
	var p struct {
		Name      string            `json:"name"`
		Arguments map[string]string `json:"arguments"`
	}
	if err := json.Unmarshal(r.params, &p); err != nil || p.Name == "" {
		return nil, newRPCError(codeInvalidParams, "invalid params: name (a string) is required; arguments maps names to strings")
	}
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
	description: `Schedules a message to yourself after delay_seconds, optionally repeating: to check on a deploy, a build or a background task later.

How a fired callback reaches you: telson sends it to the client at once as a log message (notifications/message; most clients show that to the user, not to you), and puts "[callback N] <message>" at the top of the next result of any telson tool. It cannot wake you while you are idle: you see it with your next tool call.

- set (the default action): message (at most 2048 characters) and delay_seconds (1-3600) are required. repeat_count: how many times it fires (default 20; -1 forever; 0 or 1 once). Each repeat re-arms from the fire.
- list: the active callbacks, their slot ids (0-7) and when each fires next.
- cancel: cancels slot callback_id; without callback_id, every callback.
Eight slots; callbacks last as long as this connection.

Example: {"message": "Check the deploy job; if it finished, report and cancel this callback.", "delay_seconds": 120, "repeat_count": 10}`,
	input: `{"type":"object","properties":{
		"action":{"type":"string","enum":["set","list","cancel"],"description":"set (the default), list or cancel."},
		"message":{"type":"string","description":"What you are told when it fires (set; at most 2048 characters)."},
		"delay_seconds":{"type":"integer","description":"Seconds until it fires, and between repeats (set; 1-3600)."},
		"repeat_count":{"type":"integer","description":"How many times it fires: default 20, -1 forever, 0 or 1 once."},
		"callback_id":{"type":"integer","description":"Slot 0-7 to cancel; omit it to cancel all."}},
		"additionalProperties":false}`,
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
	remaining int64 // fires left; -1 forever
	fireAt    time.Time
	timer     stopper
}

// arm starts slot i's timer; the caller holds cb.mu.
func (cb *callbackSlots) arm(i int, sl *callbackSlot) {
	sl.fireAt = cb.now().Add(sl.delay)
	sl.timer = cb.afterFunc(sl.delay, func() { cb.fire(i, sl) })
}

func (cb *callbackSlots) fire(i int, sl *callbackSlot) {
	cb.mu.Lock()
	if cb.slots[i] != sl { // cancelled, or the session ended
		cb.mu.Unlock()
		return
	}
	if sl.remaining > 0 {
		sl.remaining--
	}
	if sl.remaining == 0 {
		cb.slots[i] = nil
	} else {
		cb.arm(i, sl)
	}
	cb.mu.Unlock()
	cb.announce(fmt.Sprintf("[callback %d] %s", i, sl.message))
}

// cancel stops slot i (all slots when i < 0) and returns how many were active.
func (cb *callbackSlots) cancel(i int64) int {
	n := 0
	for j, sl := range cb.slots {
		if sl != nil && (i < 0 || int64(j) == i) {
			sl.timer.Stop()
			cb.slots[j], n = nil, n+1
		}
	}
	return n
}

func callbackPreview(msg string) string {
	if r := []rune(strings.Join(strings.Fields(msg), " ")); len(r) > 64 {
		return `"` + string(r[:64]) + `..."`
	}
	return strconv.Quote(strings.Join(strings.Fields(msg), " "))
}

func runSetCallback(ctx context.Context, c *toolCall) toolResult {
	a := struct {
		Action       string `json:"action"`
		Message      string `json:"message"`
		DelaySeconds *int64 `json:"delay_seconds"`
		RepeatCount  int64  `json:"repeat_count"`
		CallbackID   *int64 `json:"callback_id"`
	}{RepeatCount: 20}
	if err := json.Unmarshal(c.args, &a); err != nil { // an integer too large for int64
		return errorResult("Error: invalid arguments: %v", err)
	}
	cb := c.s.workflow.callbacks
	cb.mu.Lock()
	defer cb.mu.Unlock()
	if cb.stopped {
		return errorResult("Error: callback slots not available")
	}
	switch a.Action {
	case "list":
		var lines []string
		for i, sl := range cb.slots {
			if sl == nil {
				continue
			}
			left, count := max(sl.fireAt.Sub(cb.now()), 0).Round(time.Second), "infinite"
			if sl.remaining >= 0 {
				count = fmt.Sprintf("%d left", sl.remaining)
			}
			lines = append(lines, fmt.Sprintf("\n  [%d] %s - fires in %dm%02ds (%s)", i, callbackPreview(sl.message), int(left.Minutes()), int(left.Seconds())%60, count))
		}
		if len(lines) == 0 {
			return textResult("No active callbacks.")
		}
		return textResult(fmt.Sprintf("Active callbacks (%d/%d):%s", len(lines), callbackSlotCount, strings.Join(lines, "")))
	case "cancel":
		if a.CallbackID == nil {
			return textResult(fmt.Sprintf("Cancelled %d callbacks.", cb.cancel(-1)))
		}
		switch id := *a.CallbackID; {
		case id < 0 || id >= callbackSlotCount:
			return errorResult("Error: callback_id %d out of range (max %d)", id, callbackSlotCount-1)
		case cb.slots[id] == nil:
			return errorResult("Error: callback slot %d is not active", id)
		default:
			msg := cb.slots[id].message
			cb.cancel(id)
			return textResult(fmt.Sprintf("Cancelled callback slot %d: %s", id, callbackPreview(msg)))
		}
	}
	i := slices.Index(cb.slots[:], nil)
	switch n := len([]rune(a.Message)); {
	case strings.TrimSpace(a.Message) == "":
		return errorResult("Error: missing message parameter")
	case n > 2048:
		return errorResult("Error: message is too long (max 2048 characters, got %d)", n)
	case a.DelaySeconds == nil:
		return errorResult("Error: missing delay_seconds parameter (1-3600)")
	case *a.DelaySeconds < 1 || *a.DelaySeconds > 3600:
		return errorResult("Error: delay_seconds must be between 1 and 3600 (got %d)", *a.DelaySeconds)
	case a.RepeatCount < -1:
		return errorResult("Error: repeat_count must be -1 (forever), 0 or 1 (once), or more (got %d)", a.RepeatCount)
	case i < 0:
		return errorResult("Error: all callback slots full (max %d)", callbackSlotCount)
	}
	if a.RepeatCount == 0 {
		a.RepeatCount = 1 // 0 and 1 both mean once
	}
	times := fmt.Sprintf("repeats %d times.", a.RepeatCount)
	if a.RepeatCount == -1 {
		times = "repeats infinitely."
	}
	cb.slots[i] = &callbackSlot{message: a.Message, delay: time.Duration(*a.DelaySeconds) * time.Second, remaining: a.RepeatCount}
	cb.arm(i, cb.slots[i])
	return textResult(fmt.Sprintf("Callback scheduled: fires every %ds, %s\nSlot %d; cancel it with {\"action\":\"cancel\",\"callback_id\":%d}.", *a.DelaySeconds, times, i, i))
}

// ---- the session's workflow state ----

// sessionWorkflow is a session's plan mode, callbacks and skill watch.
type sessionWorkflow struct {
	plan      *planState
	callbacks *callbackSlots
	skillGen  atomic.Int64  // catalog generation this session's client knows
	done      chan struct{} // closed by the first stopWorkflow (callbacks.stopped says it ran)
}

func newSessionWorkflow(s *session) *sessionWorkflow {
	w := &sessionWorkflow{plan: &planState{}, done: make(chan struct{}), callbacks: &callbackSlots{announce: s.announce, now: time.Now,
		afterFunc: func(d time.Duration, f func()) stopper { return time.AfterFunc(d, f) }}}
	gen, _, _ := s.srv.skills.refresh(s.srv, s.shell.dir())
	w.skillGen.Store(gen)
	return w
}

// watchSkills checks the skill folders every two seconds until stopWorkflow.
func (s *session) watchSkills() {
	go func() { // exits when stopWorkflow closes done
		t := time.NewTicker(2 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-s.workflow.done:
				return
			case <-t.C:
				s.checkSkills()
			}
		}
	}()
}

// stopWorkflow ends the session's callbacks and skill watch.
func (s *session) stopWorkflow() {
	cb := s.workflow.callbacks
	cb.mu.Lock()
	defer cb.mu.Unlock()
	if !cb.stopped {
		close(s.workflow.done)
	}
	cb.stopped = true
	cb.cancel(-1)
}
