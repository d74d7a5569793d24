// bg_test.go tests the background task tools against real processes: output
// order, incremental and waiting reads, the bounded buffer, kills that leave
// nothing behind, limits, notices and concurrent reads; and benchmarks the
// server's memory under a flood and the latency of a read.
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// bgServer starts an in-process telson on protocol 2025-06-18 (structured content on).
func bgServer(t *testing.T, args ...string) *testClient {
	t.Helper()
	c := startServer(t, args...)
	c.initialize("2025-06-18")
	return c
}

func bgStructured(t *testing.T, res map[string]any) map[string]any {
	t.Helper()
	sc, ok := res["structuredContent"].(map[string]any)
	if !ok {
		t.Fatalf("no structuredContent: %v", res)
	}
	return sc
}

// bgStart starts command with BackgroundBash and returns the task id.
func bgStart(t *testing.T, c *testClient, command string) int {
	t.Helper()
	res := c.callTool("BackgroundBash", map[string]any{"command": command})
	if isError(res) {
		t.Fatalf("BackgroundBash %q: %s", command, resultText(res))
	}
	return int(bgStructured(t, res)["task_id"].(float64))
}

func bgRead(t *testing.T, c *testClient, id, waitMS int) map[string]any {
	t.Helper()
	res := c.callTool("ReadBgOutput", map[string]any{"task_id": id, "wait_ms": waitMS})
	if isError(res) {
		t.Fatalf("ReadBgOutput %d: %s", id, resultText(res))
	}
	return res
}

// bgReadToEnd reads until the task has ended and returns all its output and the last result.
func bgReadToEnd(t *testing.T, c *testClient, id int) (string, map[string]any) {
	t.Helper()
	var out strings.Builder
	for {
		res := bgRead(t, c, id, 10000)
		sc := bgStructured(t, res)
		out.WriteString(sc["output"].(string))
		if sc["status"] != "running" && sc["unread_bytes"].(float64) == 0 {
			return out.String(), res
		}
	}
}

// bgSend sends a tools/call without waiting for its answer and returns its id.
func bgSend(c *testClient, name string, args any) float64 {
	c.t.Helper()
	c.nextID++
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": c.nextID, "method": "tools/call",
		"params": map[string]any{"name": name, "arguments": args}})
	c.send(string(b))
	return float64(c.nextID)
}

// bgWaitNote waits for a notifications/message whose data contains substr,
// looking first at the notifications already received.
func bgWaitNote(c *testClient, substr string) {
	c.t.Helper()
	match := func(m map[string]any) bool {
		p, _ := m["params"].(map[string]any)
		return m["method"] == "notifications/message" && strings.Contains(fmt.Sprint(p["data"]), substr)
	}
	c.mu.Lock()
	seen := c.notes
	c.mu.Unlock()
	for _, m := range seen {
		if match(m) {
			return
		}
	}
	for {
		m := c.recv()
		if _, ok := m["method"]; !ok {
			c.t.Fatalf("unexpected response while waiting for a notice: %v", m)
		}
		c.mu.Lock()
		c.notes = append(c.notes, m)
		c.mu.Unlock()
		if match(m) {
			return
		}
	}
}

// bgCheckSchema checks v against the parts of JSON Schema the output schemas use.
func bgCheckSchema(t *testing.T, path string, schema map[string]any, v any) {
	t.Helper()
	switch schema["type"] {
	case "object":
		obj, ok := v.(map[string]any)
		if !ok {
			t.Fatalf("%s: want an object, got %v", path, v)
		}
		for _, r := range schema["required"].([]any) {
			if _, ok := obj[r.(string)]; !ok {
				t.Errorf("%s: required %q missing in %v", path, r, obj)
			}
		}
		props, _ := schema["properties"].(map[string]any)
		for k, x := range obj {
			if p, ok := props[k].(map[string]any); ok {
				bgCheckSchema(t, path+"."+k, p, x)
			}
		}
	case "array":
		for i, x := range v.([]any) {
			bgCheckSchema(t, fmt.Sprintf("%s[%d]", path, i), schema["items"].(map[string]any), x)
		}
	case "integer":
		if f, ok := v.(float64); !ok || f != float64(int64(f)) {
			t.Errorf("%s: want an integer, got %v", path, v)
		}
	case "string":
		if _, ok := v.(string); !ok {
			t.Errorf("%s: want a string, got %v", path, v)
		}
	}
	if enum, ok := schema["enum"].([]any); ok {
		found := false
		for _, e := range enum {
			found = found || e == v
		}
		if !found {
			t.Errorf("%s: %v is not one of %v", path, v, enum)
		}
	}
}

func bgOutputSchemas(t *testing.T, c *testClient) map[string]map[string]any {
	t.Helper()
	resp := c.request("tools/list", nil)
	schemas := map[string]map[string]any{}
	for _, x := range resp["result"].(map[string]any)["tools"].([]any) {
		tool := x.(map[string]any)
		if s, ok := tool["outputSchema"].(map[string]any); ok {
			schemas[tool["name"].(string)] = s
		}
	}
	return schemas
}

func TestBgToolOrder(t *testing.T) {
	var names []string
	for _, d := range toolTable {
		names = append(names, d.name)
	}
	if got := strings.Join(names, ","); !strings.HasPrefix(got, "Bash,BackgroundBash,ReadBgOutput,ListBgTasks,KillBgTask") {
		t.Errorf("tool table starts %s", got)
	}
}

func TestBgOutputOrderAndSchemas(t *testing.T) {
	t.Parallel()
	c := bgServer(t)
	schemas := bgOutputSchemas(t, c)
	res := c.callTool("BackgroundBash", map[string]any{"command": "echo out1; echo err1 >&2; echo out2; echo err2 >&2; printf tail; exit 3"})
	bgCheckSchema(t, "BackgroundBash", schemas["BackgroundBash"], bgStructured(t, res))
	if !strings.Contains(resultText(res), `ReadBgOutput {"task_id": 1`) {
		t.Errorf("start reply has no hint: %s", resultText(res))
	}
	out, last := bgReadToEnd(t, c, 1)
	if out != "out1\nerr1\nout2\nerr2\ntail" {
		t.Errorf("output %q", out)
	}
	sc := bgStructured(t, last)
	bgCheckSchema(t, "ReadBgOutput", schemas["ReadBgOutput"], sc)
	if sc["status"] != "exited" || sc["exit_code"] != 3.0 {
		t.Errorf("status %v exit_code %v", sc["status"], sc["exit_code"])
	}
	if text := resultText(last); !strings.Contains(text, "[task 1 exited with status 3 after ") {
		t.Errorf("no status line: %q", text)
	}
	list := c.callTool("ListBgTasks", map[string]any{})
	bgCheckSchema(t, "ListBgTasks", schemas["ListBgTasks"], bgStructured(t, list))
	kill := c.callTool("KillBgTask", map[string]any{"task_id": 1})
	bgCheckSchema(t, "KillBgTask", schemas["KillBgTask"], bgStructured(t, kill))
	if text := resultText(kill); isError(kill) || !strings.Contains(text, "Task 1 had already ended.\n(no new output)\n[task 1 exited with status 3 after ") {
		t.Errorf("kill of an ended task: %q", text)
	}
}

// bgFifo makes a named pipe a task blocks on until the test writes a line to it.
func bgFifo(t *testing.T) (path string, release func()) {
	t.Helper()
	path = filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Fatal(err)
	}
	return path, func() {
		f, err := os.OpenFile(path, os.O_WRONLY, 0) // blocks until the task opens it
		if err != nil {
			t.Error(err)
			return
		}
		f.WriteString("go\n")
		f.Close()
	}
}

func TestBgIncrementalReads(t *testing.T) {
	t.Parallel()
	c := bgServer(t)
	fifo, release := bgFifo(t)
	fifo2, release2 := bgFifo(t) // one per step: a writer still closing one would end the next read early
	id := bgStart(t, c, "echo first; read x < "+shellQuote(fifo)+"; echo second; read x < "+shellQuote(fifo2)+"; echo third")
	if out := bgStructured(t, bgRead(t, c, id, 10000))["output"]; out != "first\n" {
		t.Fatalf("first read %q", out)
	}
	res := bgRead(t, c, id, 0)
	if sc := bgStructured(t, res); sc["output"] != "" || sc["status"] != "running" {
		t.Errorf("read with nothing new: %v", sc)
	}
	if text := resultText(res); !strings.Contains(text, "(no new output)") || !strings.Contains(text, "[task 1 running for ") {
		t.Errorf("text %q", text)
	}
	release()
	if out := bgStructured(t, bgRead(t, c, id, 10000))["output"]; out != "second\n" {
		t.Errorf("second read %q", out)
	}
	release2()
	if out, _ := bgReadToEnd(t, c, id); out != "third\n" {
		t.Errorf("third read %q", out)
	}
}

// TestBgWaitWakes waits longer than the watchdog, so a wait that does not wake fails the test.
func TestBgWaitWakes(t *testing.T) {
	t.Parallel()
	t.Run("output", func(t *testing.T) {
		t.Parallel()
		c := bgServer(t)
		fifo, release := bgFifo(t)
		id := bgStart(t, c, "read x < "+shellQuote(fifo)+"; echo late; sleep 1000")
		req := bgSend(c, "ReadBgOutput", map[string]any{"task_id": id, "wait_ms": 60000})
		release()
		sc := bgStructured(t, c.waitResponse(req)["result"].(map[string]any))
		if sc["output"] != "late\n" || sc["status"] != "running" {
			t.Errorf("got %v", sc)
		}
	})
	t.Run("exit", func(t *testing.T) {
		t.Parallel()
		c := bgServer(t)
		fifo, release := bgFifo(t)
		id := bgStart(t, c, "read x < "+shellQuote(fifo)+"; exit 7")
		req := bgSend(c, "ReadBgOutput", map[string]any{"task_id": id, "wait_ms": 60000})
		release()
		sc := bgStructured(t, c.waitResponse(req)["result"].(map[string]any))
		if sc["output"] != "" || sc["status"] != "exited" || sc["exit_code"] != 7.0 {
			t.Errorf("got %v", sc)
		}
	})
	t.Run("timeout", func(t *testing.T) {
		t.Parallel()
		c := bgServer(t)
		id := bgStart(t, c, "sleep 1000")
		sc := bgStructured(t, bgRead(t, c, id, 50))
		if sc["output"] != "" || sc["status"] != "running" || sc["exit_code"] != -1.0 {
			t.Errorf("got %v", sc)
		}
	})
	t.Run("cancelled", func(t *testing.T) {
		t.Parallel()
		c := bgServer(t)
		id := bgStart(t, c, "sleep 1000")
		req := bgSend(c, "ReadBgOutput", map[string]any{"task_id": id, "wait_ms": 60000})
		c.send(fmt.Sprintf(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":%v}}`, req))
		// At EOF the server waits for running requests: a read still waiting would hold it past the watchdog.
		c.in.Close()
		select {
		case err := <-c.done:
			c.done <- err
		case <-time.After(watchdog):
			t.Fatal("the cancelled read kept the server from stopping")
		}
	})
}

func TestBgDroppedBytes(t *testing.T) {
	t.Parallel()
	c := bgServer(t, "-bg-buffer-bytes", "1000")
	id := bgStart(t, c, "head -c 5000 /dev/zero | tr '\\0' a; echo; echo end")
	bgWaitNote(c, "background task 1 exited with status 0")
	res := bgRead(t, c, id, 0)
	sc := bgStructured(t, res)
	out := sc["output"].(string)
	if sc["dropped_bytes"] != 4005.0 || len(out) != 1000 || !strings.HasSuffix(out, "aaa\nend\n") {
		t.Errorf("dropped %v, output %d bytes ending %q", sc["dropped_bytes"], len(out), out[max(0, len(out)-10):])
	}
	if text := resultText(res); !strings.Contains(text, "[4005 bytes dropped: the task printed more than its 1000-byte buffer holds") {
		t.Errorf("text does not say what was dropped: %.200q", text)
	}
	if sc := bgStructured(t, bgRead(t, c, id, 0)); sc["dropped_bytes"] != 0.0 || sc["output"] != "" {
		t.Errorf("second read: %v", sc)
	}
}

// TestBgBufferModel appends and takes random amounts and checks the ring against a plain model.
func TestBgBufferModel(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	bt := &bgTask{limit: 300, changed: make(chan struct{})}
	var unread []byte // what the ring should hold
	var dropped int64
	var printed byte
	for i := 0; i < 20000; i++ {
		if rng.Intn(3) == 0 {
			limit := 1 + rng.Intn(400)
			out, d := bt.take(limit)
			k := min(limit, len(unread))
			if out != string(unread[:k]) || d != dropped {
				t.Fatalf("step %d: took %q, %d dropped; want %q, %d dropped", i, out, d, unread[:k], dropped)
			}
			unread, dropped = append([]byte(nil), unread[k:]...), 0
			continue
		}
		chunk := make([]byte, rng.Intn(700))
		for j := range chunk {
			chunk[j] = 'a' + printed%26
			printed++
		}
		bt.Write(chunk)
		if unread = append(unread, chunk...); len(unread) > 300 {
			dropped += int64(len(unread) - 300)
			unread = unread[len(unread)-300:]
		}
		if len(bt.ring) > bt.limit || bt.n != len(unread) {
			t.Fatalf("step %d: ring of %d bytes holds %d, want %d", i, len(bt.ring), bt.n, len(unread))
		}
	}
}

// TestBgTakeHoldsCutCharacter: a character the pipe delivered in two pieces is returned whole.
func TestBgTakeHoldsCutCharacter(t *testing.T) {
	bt := &bgTask{limit: 100, changed: make(chan struct{})}
	bt.Write([]byte("ab\xc3"))
	if out, _ := bt.take(100); out != "ab" || bt.n != 1 {
		t.Errorf("took %q, %d left", out, bt.n)
	}
	bt.Write([]byte("\xa9"))
	if out, _ := bt.take(100); out != "é" {
		t.Errorf("took %q", out)
	}
}

func TestBgReadLimitKeepsCharacters(t *testing.T) {
	t.Parallel()
	c := bgServer(t, "-output-limit", "1001")
	id := bgStart(t, c, "for i in $(seq 1500); do printf 'é'; done")
	bgWaitNote(c, "background task 1 exited")
	res := bgRead(t, c, id, 0)
	sc := bgStructured(t, res)
	if out := sc["output"].(string); out != strings.Repeat("é", 500) || sc["unread_bytes"] != 2000.0 {
		t.Errorf("first read: %d characters, unread %v", len([]rune(out)), sc["unread_bytes"])
	}
	if text := resultText(res); !strings.Contains(text, "[2000 more bytes waiting: call ReadBgOutput again]") {
		t.Errorf("text does not say more is waiting: %.100q", text[len(text)-100:])
	}
	for i := 0; i < 2; i++ {
		if out := bgStructured(t, bgRead(t, c, id, 0))["output"]; out != strings.Repeat("é", 500) {
			t.Errorf("read %d: %q", i+2, out)
		}
	}
}

func TestBgKillChildIgnoringTerm(t *testing.T) {
	t.Parallel()
	c := bgServer(t)
	pidFile := filepath.Join(t.TempDir(), "pid")
	id := bgStart(t, c, "(trap '' TERM; exec sleep 1000) & echo $! > "+shellQuote(pidFile)+"; echo ready; wait")
	pid := readPidFile(t, pidFile)
	res := c.callTool("KillBgTask", map[string]any{"task_id": id})
	sc := bgStructured(t, res)
	if isError(res) || sc["status"] != "killed" || sc["signal"] != "TERM" || sc["output"] != "ready\n" {
		t.Errorf("kill: %v", sc)
	}
	if text := resultText(res); !strings.HasPrefix(text, "Stopped task 1.") || !strings.Contains(text, "[task 1 killed by signal TERM after ") {
		t.Errorf("text %q", text)
	}
	waitGone(t, pid)
	// A kill announces nothing: its reply said how the task ended.
	if text := resultText(c.callTool("ListBgTasks", map[string]any{})); strings.Contains(text, "background task 1") {
		t.Errorf("notice after a kill: %q", text)
	}
}

func TestBgKillLeftoverProcesses(t *testing.T) {
	t.Parallel()
	c := bgServer(t)
	pidFile := filepath.Join(t.TempDir(), "pid")
	id := bgStart(t, c, "sleep 1000 >/dev/null 2>&1 & echo $! > "+shellQuote(pidFile))
	pid := readPidFile(t, pidFile)
	bgWaitNote(c, "background task 1 exited with status 0")
	res := c.callTool("KillBgTask", map[string]any{"task_id": id})
	if isError(res) || !strings.Contains(resultText(res), "\nTask 1 had already ended.\n") {
		t.Errorf("kill: %s", resultText(res))
	}
	waitGone(t, pid)
}

func TestBgServerExitKillsTasks(t *testing.T) {
	t.Parallel()
	c := bgServer(t)
	dir := t.TempDir()
	bgStart(t, c, "sleep 1000 & echo $! > "+shellQuote(filepath.Join(dir, "a"))+"; wait")
	bgStart(t, c, "echo $$ > "+shellQuote(filepath.Join(dir, "b"))+"; trap '' TERM; while :; do sleep 1; done")
	a, b := readPidFile(t, filepath.Join(dir, "a")), readPidFile(t, filepath.Join(dir, "b"))
	c.in.Close()
	select {
	case err := <-c.done:
		c.done <- err
	case <-time.After(watchdog):
		t.Fatal("server did not stop")
	}
	waitGone(t, a)
	waitGone(t, b)
}

func TestBgBinaryExitKillsTasks(t *testing.T) {
	t.Parallel()
	for _, how := range []string{"eof", "sigterm", "sigkill"} {
		how := how
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			c := startBinary(t, nil)
			c.initialize("2025-11-25")
			pidFile := filepath.Join(t.TempDir(), "pid")
			bgStart(t, c, "sleep 1000 & echo $! > "+shellQuote(pidFile)+"; wait")
			pid := readPidFile(t, pidFile)
			switch how {
			case "eof":
				c.in.Close()
			case "sigterm":
				c.cmd.Process.Signal(syscall.SIGTERM)
			case "sigkill": // the reaper kills the group
				c.cmd.Process.Kill()
			}
			waitGone(t, pid)
		})
	}
}

func TestBgMaxTasks(t *testing.T) {
	t.Parallel()
	c := bgServer(t, "-bg-max-tasks", "2")
	a := bgStart(t, c, "sleep 1000")
	bgStart(t, c, "sleep 1000")
	res := c.callTool("BackgroundBash", map[string]any{"command": "sleep 1000"})
	if !isError(res) || !strings.Contains(resultText(res), "2 tasks are already running") {
		t.Fatalf("third task: %s", resultText(res))
	}
	if _, ok := res["structuredContent"]; ok {
		t.Errorf("an error result carries structured content: %v", res)
	}
	c.callTool("KillBgTask", map[string]any{"task_id": a})
	if id := bgStart(t, c, "sleep 1000"); id != 3 {
		t.Errorf("task id %d after a refusal, want 3", id)
	}
}

func TestBgExitNoticeOnce(t *testing.T) {
	t.Parallel()
	c := bgServer(t)
	bgStart(t, c, "exit 1")
	bgWaitNote(c, "background task 1 exited with status 1 after ")
	first := c.callTool("Bash", map[string]any{"command": "echo hi"})
	items := first["content"].([]any)
	if len(items) != 2 || !strings.HasPrefix(items[0].(map[string]any)["text"].(string), "background task 1 exited with status 1 after ") {
		t.Errorf("first result after the exit: %v", items)
	}
	if text := resultText(c.callTool("Bash", map[string]any{"command": "echo hi"})); text != "hi\n" {
		t.Errorf("second result carries the notice again: %q", text)
	}
}

func TestBgUnknownTask(t *testing.T) {
	t.Parallel()
	c := bgServer(t)
	for _, name := range []string{"ReadBgOutput", "KillBgTask"} {
		res := c.callTool(name, map[string]any{"task_id": 99})
		if !isError(res) || !strings.Contains(resultText(res), "no background task 99") {
			t.Errorf("%s 99: %v", name, res)
		}
		if res := c.callTool(name, map[string]any{"task_id": 0}); !isError(res) {
			t.Errorf("%s 0: %v", name, res)
		}
		if res := c.callTool(name, map[string]any{"task_id": "1"}); !isError(res) {
			t.Errorf("%s \"1\": %v", name, res)
		}
	}
	if res := c.callTool("ReadBgOutput", map[string]any{"task_id": 1, "wait_ms": 60001}); !isError(res) {
		t.Errorf("wait_ms 60001: %v", res)
	}
	res := c.callTool("ListBgTasks", map[string]any{})
	if text := resultText(res); !strings.HasPrefix(text, "No background tasks.") || len(bgStructured(t, res)["tasks"].([]any)) != 0 {
		t.Errorf("empty list: %v", res)
	}
}

func TestBgListAndWorkingDir(t *testing.T) {
	t.Parallel()
	c := bgServer(t)
	dir, _ := filepath.EvalSymlinks(t.TempDir())
	c.callTool("Bash", map[string]any{"command": "cd " + shellQuote(dir)})
	first := bgStart(t, c, "pwd")
	long := "sleep 1000; echo " + strings.Repeat("x", 200)
	bgStart(t, c, long)
	if out, _ := bgReadToEnd(t, c, first); out != dir+"\n" {
		t.Errorf("pwd %q, want %q", out, dir)
	}
	res := c.callTool("ListBgTasks", map[string]any{})
	tasks := bgStructured(t, res)["tasks"].([]any)
	if len(tasks) != 2 || tasks[0].(map[string]any)["task_id"] != 2.0 || tasks[1].(map[string]any)["status"] != "exited" {
		t.Fatalf("list: %v", tasks)
	}
	if cmd := tasks[0].(map[string]any)["command"].(string); len([]rune(cmd)) != 80 || !strings.HasSuffix(cmd, "…") {
		t.Errorf("long command not shortened: %q", cmd)
	}
	lines := strings.Split(resultText(res), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "task 2: running for ") || !strings.HasPrefix(lines[1], "task 1: exited with status 0 after ") {
		t.Errorf("list text %q", resultText(res))
	}
}

func TestBgConcurrentReads(t *testing.T) {
	t.Parallel()
	c := bgServer(t)
	var want strings.Builder
	for i := 1; i <= 20000; i++ {
		fmt.Fprintf(&want, "%d\n", i)
	}
	id := bgStart(t, c, "seq 20000")
	var total int
	for ended := false; !ended; {
		var ids []float64
		for i := 0; i < 8; i++ {
			ids = append(ids, bgSend(c, "ReadBgOutput", map[string]any{"task_id": id, "wait_ms": 1000}))
		}
		ids = append(ids, bgSend(c, "ListBgTasks", map[string]any{}))
		for answered := 0; answered < len(ids); {
			m := c.recv()
			if _, ok := m["method"]; ok {
				continue // the exit notice
			}
			answered++
			sc := bgStructured(t, m["result"].(map[string]any))
			out, ok := sc["output"].(string)
			if !ok {
				continue // the list
			}
			if !strings.Contains(want.String(), out) {
				t.Fatalf("a read returned output that is not a piece of the task's: %.80q", out)
			}
			total += len(out)
			ended = ended || (sc["status"] == "exited" && sc["unread_bytes"] == 0.0)
		}
	}
	if total != want.Len() {
		t.Errorf("read %d bytes in all, want %d", total, want.Len())
	}
}

// bgBenchProc is telson run as a real process for the benchmarks (testClient needs a *testing.T).
type bgBenchProc struct {
	b   *testing.B
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Reader
	id  int
}

func bgBenchStart(b *testing.B) *bgBenchProc {
	b.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), "TELSON_RUN_MAIN=1")
	in, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	p := &bgBenchProc{b: b, cmd: cmd, in: in, out: bufio.NewReaderSize(out, 1<<20)}
	b.Cleanup(func() { in.Close(); cmd.Wait() })
	p.call("initialize", map[string]any{"protocolVersion": "2025-06-18", "capabilities": map[string]any{}})
	return p
}

// roundTrip sends a request and reads lines until its answer, which it returns undecoded.
func (p *bgBenchProc) roundTrip(method string, params any) []byte {
	p.id++
	msg, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": p.id, "method": method, "params": params})
	if _, err := p.in.Write(append(msg, '\n')); err != nil {
		p.b.Fatal(err)
	}
	prefix := []byte(`{"jsonrpc":"2.0","id":` + strconv.Itoa(p.id) + `,`)
	for {
		line, err := p.out.ReadBytes('\n')
		if err != nil {
			p.b.Fatalf("read: %v", err)
		}
		if bytes.HasPrefix(line, prefix) {
			return line
		}
	}
}

func (p *bgBenchProc) call(method string, params any) map[string]any {
	var m map[string]any
	if err := json.Unmarshal(p.roundTrip(method, params), &m); err != nil {
		p.b.Fatal(err)
	}
	return m
}

func (p *bgBenchProc) tool(name string, args any) map[string]any {
	res, _ := p.call("tools/call", map[string]any{"name": name, "arguments": args})["result"].(map[string]any)
	return res
}

// peakRSS is the process's peak resident set size (VmHWM) in bytes.
func (p *bgBenchProc) peakRSS() float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		p.b.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmHWM:" {
			kb, _ := strconv.ParseFloat(f[1], 64)
			return kb * 1024
		}
	}
	p.b.Fatal("no VmHWM")
	return 0
}

// bgBenchSeconds is how long the flood runs: 3 s, or TELSON_TEST_BG_SECONDS.
func bgBenchSeconds() time.Duration {
	if n, err := strconv.Atoi(os.Getenv("TELSON_TEST_BG_SECONDS")); err == nil && n > 0 {
		return time.Duration(n) * time.Second
	}
	return 3 * time.Second
}

// BenchmarkBgOutputMemory floods a task's buffer with `yes` while reading it
// and reports telson's peak RSS against an idle telson's, both measured here.
// The 10 s run: TELSON_TEST_BG_SECONDS=10 go test -run '^$' -bench BgOutputMemory
func BenchmarkBgOutputMemory(b *testing.B) {
	idle := bgBenchStart(b)
	for i := 0; i < 100; i++ {
		idle.call("ping", nil)
	}
	idle.tool("ListBgTasks", map[string]any{})
	idleRSS := idle.peakRSS()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		p := bgBenchStart(b)
		p.tool("BackgroundBash", map[string]any{"command": "yes"})
		var read, dropped float64
		for start := time.Now(); time.Since(start) < bgBenchSeconds(); {
			sc := p.tool("ReadBgOutput", map[string]any{"task_id": 1})["structuredContent"].(map[string]any)
			read += float64(len(sc["output"].(string)))
			dropped += sc["dropped_bytes"].(float64)
		}
		peak := p.peakRSS()
		p.tool("KillBgTask", map[string]any{"task_id": 1})
		b.ReportMetric(peak/(1<<20), "peak-RSS-MB")
		b.ReportMetric(idleRSS/(1<<20), "idle-RSS-MB")
		b.ReportMetric(peak/idleRSS, "peak/idle")
		b.ReportMetric((read+dropped)/bgBenchSeconds().Seconds()/(1<<20), "printed-MB/s")
		if peak > 20<<20 {
			b.Errorf("peak RSS %.1f MB, target under 20 MB", peak/(1<<20))
		}
	}
}

// BenchmarkReadBgOutput measures ReadBgOutput on a running task with output
// waiting (`yes`: every read returns 30,000 characters) against a ping round
// trip to the same process.
func BenchmarkReadBgOutput(b *testing.B) {
	p := bgBenchStart(b)
	p.tool("BackgroundBash", map[string]any{"command": "yes"})
	median := func(d []time.Duration) time.Duration {
		sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
		return d[len(d)/2]
	}
	pings := make([]time.Duration, 2000)
	for i := range pings {
		start := time.Now()
		p.roundTrip("ping", nil)
		pings[i] = time.Since(start)
	}
	args := map[string]any{"name": "ReadBgOutput", "arguments": map[string]any{"task_id": 1}}
	reads := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		p.roundTrip("tools/call", args)
		reads = append(reads, time.Since(start))
	}
	b.StopTimer()
	m, mp := median(reads), median(pings)
	b.ReportMetric(float64(m.Microseconds()), "median-µs")
	b.ReportMetric(float64(mp.Microseconds()), "ping-median-µs")
	b.ReportMetric(float64(m)/float64(mp), "median/ping")
}
