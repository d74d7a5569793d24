// tools_bg.go holds the background task tools: BackgroundBash starts a
// command that keeps running, ReadBgOutput returns what it printed since the
// previous read, ListBgTasks lists the session's tasks, KillBgTask stops one.
//
// Rules:
//   - tasks belong to a session and die with it; each runs in its own process
//     group started through procTracker, so nothing outlives the server;
//   - a task keeps at most BG_BUFFER_BYTES of unread output: beyond that the
//     oldest unread bytes are dropped and counted, so memory stays bounded;
//   - a reader waits on a channel closed at every change, never by polling;
//   - a task's end is announced once, unless a KillBgTask reply says it.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// Output schemas: a task, and a task with the output a read took.
const (
	bgProps = `"task_id":{"type":"integer"},"pid":{"type":"integer","description":"bash's pid and process group id"},"command":{"type":"string"},
		"status":{"type":"string","enum":["running","exited","killed"],"description":"killed: ended by a signal"},
		"exit_code":{"type":"integer","description":"-1 while running or when ended by a signal"},"signal":{"type":"string"},
		"runtime_ms":{"type":"integer"},"unread_bytes":{"type":"integer","description":"output waiting for the next read"},
		"dropped_bytes":{"type":"integer","description":"output lost since the previous read because the buffer was full"}`
	bgRequired   = `"task_id","pid","command","status","exit_code","runtime_ms","unread_bytes","dropped_bytes"`
	bgTaskSchema = `{"type":"object","properties":{` + bgProps + `},"required":[` + bgRequired + `]}`
	bgReadSchema = `{"type":"object","properties":{` + bgProps + `,"output":{"type":"string"}},"required":[` + bgRequired + `,"output"]}`
	bgIDInput    = `"task_id":{"type":"integer","minimum":1,"description":"The id BackgroundBash returned."}`
)

var backgroundBashTool = toolDef{
	name:  "BackgroundBash",
	title: "Start a background command",
	describe: func(srv *server) string {
		return fmt.Sprintf(`Starts a command with bash -c in the background and returns at once with a task id: for dev servers, watchers, long builds and tests while you keep working.

- Runs in Bash's working directory; stdin is /dev/null; stdout and stderr are merged in order.
- ReadBgOutput returns the output new since the previous read (wait_ms waits for some), KillBgTask stops the task and everything it started, ListBgTasks lists the tasks.
- A task keeps up to %d bytes of unread output (BG_BUFFER_BYTES); beyond that the oldest unread output is dropped and the next read says how much.
- At most %d tasks run at once (BG_MAX_TASKS). When a task ends, the next tool result starts with a notice. Tasks die when the server stops.

Example: {"command": "npm run dev"}`, srv.cfg.int("BG_BUFFER_BYTES"), srv.cfg.int("BG_MAX_TASKS"))
	},
	input: `{"type":"object","properties":{"command":{"type":"string","minLength":1,"description":"The command line to run with bash -c."}},
		"required":["command"],"additionalProperties":false}`,
	output: bgTaskSchema,
	hints:  toolHints{destructive: true, openWorld: true},
	run:    runBackgroundBash,
}

var readBgOutputTool = toolDef{
	name:  "ReadBgOutput",
	title: "Read a background task's output",
	describe: func(srv *server) string {
		return fmt.Sprintf(`Returns the output a background task printed since the previous ReadBgOutput of it, then a status line: running for how long, or how it ended (exit status or signal) after how long.

- wait_ms (up to 60000) waits, when no output is waiting, until there is some or the task ends: no need to poll in a loop.
- A reply carries at most %d bytes of output (OUTPUT_LIMIT); the rest stays for the next call and the reply says how much waits.
- If the task printed more than its buffer holds between two reads, the reply says how many bytes were dropped.

Example: {"task_id": 1, "wait_ms": 5000}`, srv.cfg.int("OUTPUT_LIMIT"))
	},
	input: `{"type":"object","properties":{` + bgIDInput + `,
		"wait_ms":{"type":"integer","minimum":0,"maximum":60000,"description":"Milliseconds to wait for output or the end when none is waiting (default 0)."}},
		"required":["task_id"],"additionalProperties":false}`,
	output: bgReadSchema,
	hints:  toolHints{readOnly: true},
	run:    runReadBgOutput,
}

var listBgTasksTool = toolDef{
	name:        "ListBgTasks",
	title:       "List background tasks",
	description: "Lists this session's background tasks, newest first: id, status (running, exited, killed), exit status, runtime, unread output, pid and command (shortened). The last 100 finished tasks are kept.\n\nExample: {}",
	input:       `{"type":"object","properties":{},"additionalProperties":false}`,
	output:      `{"type":"object","properties":{"tasks":{"type":"array","items":` + bgTaskSchema + `}},"required":["tasks"]}`,
	hints:       toolHints{readOnly: true, idempotent: true},
	run:         runListBgTasks,
}

var killBgTaskTool = toolDef{
	name:        "KillBgTask",
	title:       "Stop a background task",
	description: "Stops a background task and every process it started: TERM to its process group, KILL 2 seconds later. Answers with how the task ended and its unread output. A task that already ended is not an error: the reply says how it ended, and anything it left running is stopped.\n\nExample: {\"task_id\": 1}",
	input:       `{"type":"object","properties":{` + bgIDInput + `},"required":["task_id"],"additionalProperties":false}`,
	output:      bgReadSchema,
	hints:       toolHints{destructive: true, idempotent: true},
	run:         runKillBgTask,
}

// bgTasks is one session's background tasks.
type bgTasks struct {
	procs *procTracker
	wg    sync.WaitGroup // counts the tasks' wait goroutines and closeAll's kills

	mu     sync.Mutex // guards the fields below
	tasks  []*bgTask  // oldest first
	nextID int
	closed bool // the session ended: nothing starts
}

func newBgTasks(procs *procTracker) *bgTasks { return &bgTasks{procs: procs} }

// bgTask is one background command and its output nobody read yet.
type bgTask struct {
	id, pid int // pid is bash's, and its process group's id
	command string
	start   time.Time
	limit   int           // the most unread bytes kept
	out     *os.File      // the output pipe's read end
	ended   chan struct{} // closed when bash has exited and the status is final

	mu      sync.Mutex // guards the fields below
	ring    []byte     // the unread output: n bytes from head, wrapping; it grows up to limit
	head, n int
	dropped int64         // unread bytes lost since the previous read
	changed chan struct{} // closed and replaced at new output and at the end
	done    bool
	end     time.Time
	code    int // the exit status; -1 while running or after a signal
	signal  string
	quiet   bool // KillBgTask or the session's end stops it: no notice announces its end
}

// bgInfo is a task in structured content.
type bgInfo struct {
	TaskID       int     `json:"task_id"`
	Pid          int     `json:"pid"`
	Command      string  `json:"command"`
	Status       string  `json:"status"`
	ExitCode     int     `json:"exit_code"`
	Signal       string  `json:"signal,omitempty"`
	RuntimeMS    int64   `json:"runtime_ms"`
	UnreadBytes  int     `json:"unread_bytes"`
	DroppedBytes int64   `json:"dropped_bytes"`
	Output       *string `json:"output,omitempty"`
}

func runBackgroundBash(ctx context.Context, c *toolCall) toolResult {
	if res, refused := c.s.planGate("BackgroundBash"); refused {
		return res
	}
	var a struct {
		Command string `json:"command"`
	}
	if err := json.Unmarshal(c.args, &a); err != nil || strings.TrimSpace(a.Command) == "" {
		return errorResult("BackgroundBash: command is missing or empty")
	}
	b, dir := c.s.bg, c.s.shell.dir()
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return errorResult("BackgroundBash: start: the session is ending")
	}
	running, finished := 0, 0
	for i := len(b.tasks) - 1; i >= 0; i-- {
		select {
		case <-b.tasks[i].ended: // keep the newest 100 finished tasks
			if finished++; finished > 100 {
				b.tasks = append(b.tasks[:i], b.tasks[i+1:]...)
			}
		default:
			running++
		}
	}
	if most := c.s.srv.cfg.int("BG_MAX_TASKS"); running >= most {
		return errorResult("BackgroundBash: %d tasks are already running, the most allowed (BG_MAX_TASKS=%d); stop one with KillBgTask first", running, most)
	}
	cmd := exec.Command("bash", "-c", a.Command)
	cmd.Dir = dir
	pr, pw, err := os.Pipe()
	if err != nil {
		return errorResult("BackgroundBash: start: %v", err)
	}
	defer pw.Close() // the child has its own copy
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := b.procs.start(cmd); err != nil {
		pr.Close()
		return errorResult("BackgroundBash: start: %v", err)
	}
	b.nextID++
	t := &bgTask{id: b.nextID, pid: cmd.Process.Pid, command: a.Command, start: time.Now(), limit: max(c.s.srv.cfg.int("BG_BUFFER_BYTES"), 256),
		out: pr, ended: make(chan struct{}), code: -1, changed: make(chan struct{})}
	b.tasks = append(b.tasks, t)
	b.wg.Add(1)
	go t.run(c.s, b, cmd) // exits once bash has exited and its output is read
	res := textResult(fmt.Sprintf("Started background task %d (pid %d) in %s.\nRead its output with ReadBgOutput {\"task_id\": %d, \"wait_ms\": 5000}; stop it with KillBgTask {\"task_id\": %d}.",
		t.id, t.pid, dir, t.id, t.id))
	res.structured, _ = t.info()
	return res
}

// closeAll ends the session's tasks and their groups; nothing is announced or started after.
func (b *bgTasks) closeAll() {
	b.mu.Lock()
	b.closed = true
	tasks := b.tasks
	b.mu.Unlock()
	for _, t := range tasks {
		t.mu.Lock()
		t.quiet = true
		t.mu.Unlock()
		b.wg.Add(1)
		go func(t *bgTask) { // exits when the group is gone
			defer b.wg.Done()
			b.procs.killGroup(t.pid, 500*time.Millisecond)
			t.out.SetReadDeadline(time.Now()) // a process that left the group may hold the pipe
		}(t)
	}
	b.wg.Wait()
}

// run reads the task's output until bash has exited, records how it ended and announces it.
func (t *bgTask) run(s *session, b *bgTasks, cmd *exec.Cmd) {
	defer b.wg.Done()
	readDone := make(chan struct{})
	go func() { // exits at EOF, or when closeAll sets a read deadline
		defer close(readDone)
		io.Copy(t, t.out)
		t.out.Close()
	}()
	err := cmd.Wait()
	select { // bash's output is in the pipe; a process it left behind may hold the pipe open
	case <-readDone:
	case <-time.After(100 * time.Millisecond):
	}
	t.mu.Lock()
	t.done, t.end = true, time.Now()
	t.code, t.signal = exitStatus(cmd, err)
	t.resizeLocked(t.n) // a finished task holds its unread bytes only
	quiet := t.quiet
	close(t.ended)
	close(t.changed)
	t.changed = make(chan struct{}) // output may still come from a process bash left behind
	t.mu.Unlock()
	b.procs.forgetIfGone(t.pid)
	if _, status := t.info(); !quiet {
		s.announce(fmt.Sprintf("background task %d %s", t.id, status))
	}
}

// Write adds output, dropping the oldest unread bytes beyond the limit.
func (t *bgTask) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	written := len(p)
	if over := t.n + len(p) - t.limit; over > 0 {
		skip := min(over, t.n)
		t.head, t.n, p, t.dropped = t.head+skip, t.n-skip, p[over-skip:], t.dropped+int64(over)
	}
	if t.n+len(p) > len(t.ring) {
		t.resizeLocked(min(t.limit, max(2*len(t.ring), t.n+len(p), 4096)))
	}
	tail := (t.head + t.n) % len(t.ring)
	copy(t.ring, p[copy(t.ring[tail:], p):])
	t.n += len(p)
	close(t.changed)
	t.changed = make(chan struct{})
	return written, nil
}

// peekLocked copies the first len(dst) unread bytes, at most t.n, into dst.
func (t *bgTask) peekLocked(dst []byte) {
	t.head %= max(len(t.ring), 1)
	copy(dst[copy(dst, t.ring[t.head:]):], t.ring)
}

func (t *bgTask) resizeLocked(size int) {
	ring := make([]byte, size)
	t.peekLocked(ring[:t.n])
	t.ring, t.head = ring, 0
}

// take removes and returns up to limit bytes of unread output, never
// cutting a character in two, and the bytes dropped before them.
func (t *bgTask) take(limit int) (string, int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	u := make([]byte, min(limit, t.n))
	t.peekLocked(u)
	n := len(u)
	for i := n - 1; i >= max(0, n-3) && (n < t.n || !t.done); i-- {
		if utf8.RuneStart(u[i]) {
			if !utf8.FullRune(u[i:n]) {
				n = i
			}
			break
		}
	}
	out, dropped := validUTF8(string(u[:n])), t.dropped
	t.head, t.n, t.dropped = t.head+n, t.n-n, 0
	if t.n == 0 && t.done {
		t.ring = nil
	}
	return out, dropped
}

// info describes the task and says how it is: "running for 12s", "exited
// with status 0 after 1m4s" or "killed by signal TERM after 3s".
func (t *bgTask) info() (bgInfo, string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	d := time.Since(t.start)
	if t.done {
		d = t.end.Sub(t.start)
	}
	i := bgInfo{TaskID: t.id, Pid: t.pid, Command: t.command, Status: "running", ExitCode: t.code, Signal: t.signal,
		RuntimeMS: d.Milliseconds(), UnreadBytes: t.n, DroppedBytes: t.dropped}
	if d = d.Truncate(time.Millisecond); d >= time.Second {
		d = d.Round(time.Second)
	}
	status := "running for " + d.String()
	if t.done && t.signal != "" {
		i.Status, status = "killed", fmt.Sprintf("killed by signal %s after %s", t.signal, d)
	} else if t.done {
		i.Status, status = "exited", fmt.Sprintf("exited with status %d after %s", t.code, d)
	}
	return i, status
}

// report takes the unread output (up to limit bytes) and describes the
// task: the reply of ReadBgOutput and KillBgTask, after note.
func (t *bgTask) report(limit int, note string) toolResult {
	out, dropped := t.take(limit)
	info, status := t.info()
	info.Output, info.DroppedBytes = &out, dropped
	var b strings.Builder
	b.WriteString(note)
	if dropped > 0 {
		fmt.Fprintf(&b, "[%d bytes dropped: the task printed more than its %d-byte buffer holds since the previous read]\n", dropped, t.limit)
	}
	text := out
	if out == "" {
		text = "(no new output)"
	}
	b.WriteString(strings.TrimSuffix(text, "\n") + "\n")
	if info.UnreadBytes > 0 {
		fmt.Fprintf(&b, "[%d more bytes waiting: call ReadBgOutput again]\n", info.UnreadBytes)
	}
	fmt.Fprintf(&b, "[task %d %s]", t.id, status)
	return toolResult{content: textResult(b.String()).content, structured: info}
}

// bgFind finds the task a call names, and its wait_ms, or says why not.
func bgFind(c *toolCall, tool string) (*bgTask, time.Duration, toolResult) {
	var a struct {
		TaskID int `json:"task_id"`
		WaitMS int `json:"wait_ms"`
	}
	if err := json.Unmarshal(c.args, &a); err != nil {
		return nil, 0, errorResult("%s: invalid arguments: %v", tool, err)
	}
	c.s.bg.mu.Lock()
	defer c.s.bg.mu.Unlock()
	for _, t := range c.s.bg.tasks {
		if t.id == a.TaskID {
			return t, time.Duration(a.WaitMS) * time.Millisecond, toolResult{}
		}
	}
	return nil, 0, errorResult("%s: no background task %d in this session; ListBgTasks shows the tasks there are", tool, a.TaskID)
}

func runReadBgOutput(ctx context.Context, c *toolCall) toolResult {
	t, wait, fail := bgFind(c, "ReadBgOutput")
	if t == nil {
		return fail
	}
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	for ctx.Err() == nil { // wait while no output is waiting and the task runs
		t.mu.Lock()
		idle, changed := t.n == 0 && !t.done, t.changed
		t.mu.Unlock()
		if !idle {
			break
		}
		select { // wakes at each change: new output (a concurrent read may take it) or the end
		case <-changed:
		case <-ctx.Done():
		}
	}
	return t.report(c.s.srv.cfg.int("OUTPUT_LIMIT"), "")
}

func runKillBgTask(ctx context.Context, c *toolCall) toolResult {
	if res, refused := c.s.planGate("KillBgTask"); refused {
		return res
	}
	t, _, fail := bgFind(c, "KillBgTask")
	if t == nil {
		return fail
	}
	t.mu.Lock()
	note := fmt.Sprintf("Stopped task %d.\n", t.id)
	if t.done {
		note = fmt.Sprintf("Task %d had already ended.\n", t.id)
	}
	t.quiet = true
	t.mu.Unlock()
	c.s.srv.procs.killGroup(t.pid, killGrace) // bash and whatever it started, or left running
	c.s.srv.procs.forgetIfGone(t.pid)
	select {
	case <-t.ended:
	case <-ctx.Done():
		return errorResult("KillBgTask: cancelled: %v", ctx.Err())
	}
	return t.report(c.s.srv.cfg.int("OUTPUT_LIMIT"), note)
}

func runListBgTasks(ctx context.Context, c *toolCall) toolResult {
	c.s.bg.mu.Lock()
	tasks := append([]*bgTask(nil), c.s.bg.tasks...)
	c.s.bg.mu.Unlock()
	infos := []bgInfo{}
	var b strings.Builder
	for i := len(tasks) - 1; i >= 0; i-- {
		info, status := tasks[i].info()
		if info.Command = strings.Join(strings.Fields(info.Command), " "); len([]rune(info.Command)) > 80 {
			info.Command = string([]rune(info.Command)[:79]) + "…"
		}
		infos = append(infos, info)
		fmt.Fprintf(&b, "task %d: %s, %d bytes unread, pid %d: %s\n", info.TaskID, status, info.UnreadBytes, info.Pid, info.Command)
	}
	if len(tasks) == 0 {
		b.WriteString("No background tasks. Start one with BackgroundBash.")
	}
	return toolResult{content: textResult(strings.TrimSuffix(b.String(), "\n")).content, structured: map[string]any{"tasks": infos}}
}
