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
	"errors"
	"fmt"
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

// bgKeepFinished is how many finished tasks a session keeps for reading.
const bgKeepFinished = 100

// bgTasks is one session's background tasks.
type bgTasks struct {
	procs *procTracker
	wg    sync.WaitGroup // counts the tasks' wait goroutines

	mu     sync.Mutex // guards the fields below
	tasks  []*bgTask  // oldest first
	nextID int
	closed bool // the session ended: nothing starts, nothing is announced
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

	mu       sync.Mutex // guards the fields below
	ring     []byte     // the unread output: n bytes from head, wrapping; it grows up to limit
	head, n  int
	dropped  int64         // unread bytes lost since the previous read
	changed  chan struct{} // closed and replaced at new output and at the end
	done     bool
	end      time.Time
	code     int // the exit status; -1 while running or after a signal
	signal   string
	stopping bool // KillBgTask stops it: its reply, not a notice, says how it ended
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
	dir := c.s.shell.dir()
	t, err := c.s.bg.start(c.s, a.Command, dir)
	if err != nil {
		return errorResult("BackgroundBash: %v", err)
	}
	res := textResult(fmt.Sprintf("Started background task %d (pid %d) in %s.\nRead its output with ReadBgOutput {\"task_id\": %d, \"wait_ms\": 5000}; stop it with KillBgTask {\"task_id\": %d}.",
		t.id, t.pid, dir, t.id, t.id))
	res.structured, _ = t.info()
	return res
}

// start starts command in dir as a new task of session s.
func (b *bgTasks) start(s *session, command, dir string) (*bgTask, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	running := 0
	for _, t := range b.tasks {
		if !t.isDone() {
			running++
		}
	}
	if b.closed {
		return nil, errors.New("start: the session is ending")
	}
	if most := s.srv.cfg.int("BG_MAX_TASKS"); running >= most {
		return nil, fmt.Errorf("%d tasks are already running, the most allowed (BG_MAX_TASKS=%d); stop one with KillBgTask first", running, most)
	}
	cmd := exec.Command("bash", "-c", command)
	cmd.Dir = dir
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("start: %w", err)
	}
	cmd.Stdout, cmd.Stderr = pw, pw
	err = b.procs.start(cmd)
	pw.Close()
	if err != nil {
		pr.Close()
		return nil, fmt.Errorf("start: %w", err)
	}
	b.nextID++
	t := &bgTask{id: b.nextID, pid: cmd.Process.Pid, command: command, start: time.Now(), limit: max(s.srv.cfg.int("BG_BUFFER_BYTES"), 256),
		out: pr, ended: make(chan struct{}), code: -1, changed: make(chan struct{})}
	b.tasks = append(b.tasks, t)
	finished := 0 // forget the oldest finished tasks beyond bgKeepFinished
	for i := len(b.tasks) - 1; i >= 0; i-- {
		if b.tasks[i].isDone() {
			if finished++; finished > bgKeepFinished {
				b.tasks = append(b.tasks[:i], b.tasks[i+1:]...)
			}
		}
	}
	readDone := make(chan struct{})
	go t.read(readDone) // exits at EOF, or when closeAll sets a read deadline
	b.wg.Add(1)
	go t.wait(s, b, cmd, readDone) // exits once bash has exited and its output is read
	return t, nil
}

// closeAll ends the session's tasks: every group still alive is stopped and
// every task has ended when it returns. Nothing is announced or started after.
func (b *bgTasks) closeAll() {
	b.mu.Lock()
	b.closed = true
	tasks := b.tasks
	b.mu.Unlock()
	var wg sync.WaitGroup
	for _, t := range tasks {
		wg.Add(1)
		go func(pgid int) { defer wg.Done(); b.procs.killGroup(pgid, 500*time.Millisecond) }(t.pid) // exits when the group is gone
	}
	wg.Wait()
	for _, t := range tasks {
		t.out.SetReadDeadline(time.Now()) // a process that left the group may hold the pipe
	}
	b.wg.Wait()
}

func (t *bgTask) isDone() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.done
}

func (t *bgTask) read(done chan struct{}) {
	defer close(done)
	defer t.out.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := t.out.Read(buf)
		if n > 0 {
			t.append(buf[:n])
		}
		if err != nil {
			return
		}
	}
}

// append adds output, dropping the oldest unread bytes beyond the limit.
func (t *bgTask) append(p []byte) {
	t.mu.Lock()
	defer t.mu.Unlock()
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
	t.changedLocked()
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

func (t *bgTask) changedLocked() {
	close(t.changed)
	t.changed = make(chan struct{})
}

// wait waits for bash to exit, records how it ended and announces it.
func (t *bgTask) wait(s *session, b *bgTasks, cmd *exec.Cmd, readDone chan struct{}) {
	defer b.wg.Done()
	err := cmd.Wait()
	select { // bash's output is in the pipe; a process it left behind may hold the pipe open
	case <-readDone:
	case <-time.After(100 * time.Millisecond):
	}
	code, sig := exitStatus(cmd, err)
	b.mu.Lock()
	quiet := b.closed
	b.mu.Unlock()
	t.mu.Lock()
	t.done, t.end, t.code, t.signal = true, time.Now(), code, sig
	t.resizeLocked(t.n) // a finished task holds its unread bytes only
	quiet = quiet || t.stopping
	close(t.ended)
	t.changedLocked()
	t.mu.Unlock()
	b.procs.forgetIfGone(t.pid)
	if _, status := t.info(); !quiet {
		s.announce(fmt.Sprintf("background task %d %s", t.id, status))
	}
}

// waitOutput waits up to d while no output is waiting and the task runs.
func (t *bgTask) waitOutput(ctx context.Context, d time.Duration) {
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		t.mu.Lock()
		idle, changed := t.n == 0 && !t.done, t.changed
		t.mu.Unlock()
		if !idle || d <= 0 {
			return
		}
		select { // wakes at each change: new output (a concurrent read may take it) or the end
		case <-changed:
		case <-timer.C:
			return
		case <-ctx.Done():
			return
		}
	}
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
	i := bgInfo{TaskID: t.id, Pid: t.pid, Command: t.command, Status: "running", ExitCode: t.code, Signal: t.signal,
		UnreadBytes: t.n, DroppedBytes: t.dropped}
	d := time.Since(t.start)
	if t.done {
		d = t.end.Sub(t.start)
	}
	i.RuntimeMS = d.Milliseconds()
	if d = d.Round(time.Second); i.RuntimeMS < 1000 {
		d = time.Duration(i.RuntimeMS) * time.Millisecond
	}
	switch {
	case !t.done:
		return i, "running for " + d.String()
	case t.signal != "":
		i.Status = "killed"
		return i, fmt.Sprintf("killed by signal %s after %s", t.signal, d)
	}
	i.Status = "exited"
	return i, fmt.Sprintf("exited with status %d after %s", t.code, d)
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
	if text := strings.TrimSuffix(out, "\n"); out != "" {
		b.WriteString(text + "\n")
	} else {
		b.WriteString("(no new output)\n")
	}
	if info.UnreadBytes > 0 {
		fmt.Fprintf(&b, "[%d more bytes waiting: call ReadBgOutput again]\n", info.UnreadBytes)
	}
	fmt.Fprintf(&b, "[task %d %s]", t.id, status)
	res := textResult(b.String())
	res.structured = info
	return res
}

type bgTaskArgs struct {
	TaskID int `json:"task_id"`
	WaitMS int `json:"wait_ms"`
}

// bgFind reads a call's arguments into a and finds its task, or says why not.
func bgFind(c *toolCall, tool string, a *bgTaskArgs) (*bgTask, toolResult) {
	if err := json.Unmarshal(c.args, a); err != nil {
		return nil, errorResult("%s: invalid arguments: %v", tool, err)
	}
	c.s.bg.mu.Lock()
	defer c.s.bg.mu.Unlock()
	for _, t := range c.s.bg.tasks {
		if t.id == a.TaskID {
			return t, toolResult{}
		}
	}
	return nil, errorResult("%s: no background task %d in this session; ListBgTasks shows the tasks there are", tool, a.TaskID)
}

func runReadBgOutput(ctx context.Context, c *toolCall) toolResult {
	var a bgTaskArgs
	t, fail := bgFind(c, "ReadBgOutput", &a)
	if t == nil {
		return fail
	}
	t.waitOutput(ctx, time.Duration(a.WaitMS)*time.Millisecond)
	return t.report(c.s.srv.cfg.int("OUTPUT_LIMIT"), "")
}

func runKillBgTask(ctx context.Context, c *toolCall) toolResult {
	if res, refused := c.s.planGate("KillBgTask"); refused {
		return res
	}
	var a bgTaskArgs
	t, fail := bgFind(c, "KillBgTask", &a)
	if t == nil {
		return fail
	}
	t.mu.Lock()
	note := fmt.Sprintf("Stopped task %d.\n", t.id)
	if t.done {
		note = fmt.Sprintf("Task %d had already ended.\n", t.id)
	}
	t.stopping = true
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
	res := textResult(strings.TrimSuffix(b.String(), "\n"))
	res.structured = map[string]any{"tasks": infos}
	return res
}
