// proc_new_test.go tests what the proc branch added: the plan-mode sandbox,
// escaped processes found by their marker, the kept output files, tail
// reads, brief kills, notices said once, and Bash's background mode.
package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// procOutsideTmp is a directory outside /tmp, which the sandbox replaces.
func procOutsideTmp(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp(".", "proc-test-")
	if err != nil {
		t.Fatal(err)
	}
	dir, _ = filepath.Abs(dir)
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func TestPlanModeCommandsAreReadOnly(t *testing.T) {
	t.Parallel()
	if runtime.GOOS != "linux" {
		t.Skip("the sandbox needs Linux namespaces")
	}
	c := startServer(t, "-state-dir", t.TempDir())
	c.initialize("2025-06-18")
	dir := procOutsideTmp(t)
	file := filepath.Join(dir, "file")
	os.WriteFile(file, []byte("orig\n"), 0o600)
	wfCall(t, c, "PlanMode", map[string]any{"action": "enter", "goal": "look only"}, false)
	if res := c.callTool("Bash", map[string]any{"command": "true"}); isError(res) {
		t.Skipf("no sandbox here: %s", resultText(res))
	}
	for _, cmd := range []string{"echo x > file", "rm file", "touch new", "mkdir d"} {
		res := c.callTool("Bash", map[string]any{"command": "cd " + shellQuote(dir) + " && " + cmd})
		if !isError(res) {
			t.Errorf("%s succeeded in plan mode: %s", cmd, resultText(res))
		}
	}
	id := bgStart(t, c, "echo x > "+shellQuote(file)+"; echo tried")
	if out, _ := bgReadToEnd(t, c, id); !strings.Contains(out, "tried") || !strings.Contains(out, "Read-only") {
		t.Errorf("background write: %q", out)
	}
	if b, _ := os.ReadFile(file); string(b) != "orig\n" {
		t.Errorf("file changed in plan mode: %q", b)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("plan mode created files: %v", entries)
	}
	res := c.callTool("Bash", map[string]any{"command": "cat file; echo y > /tmp/t && cat /tmp/t"})
	if text := resultText(res); isError(res) || text != "orig\ny\n" {
		t.Errorf("reads and /tmp: %q", text)
	}
	if sc := bgStructured(t, res); sc["cwd"] != dir {
		t.Errorf("cwd in plan mode: %v, want %s", sc["cwd"], dir)
	}
	res = c.callTool("Bash", map[string]any{"command": "mount -o remount,rw / || mount -o remount,rw " + shellQuote(dir) +
		"; echo x > file"})
	if b, _ := os.ReadFile(file); !isError(res) || string(b) != "orig\n" {
		t.Errorf("a remount opened the sandbox: %q, file %q", resultText(res), b)
	}
	wfCall(t, c, "PlanMode", map[string]any{"action": "reset"}, false)
	if res := c.callTool("Bash", map[string]any{"command": "echo x > file"}); isError(res) {
		t.Errorf("write after plan mode: %s", resultText(res))
	}
}

// procEscapes are the ways a command leaves its process group: each writes the escaped pid to $1.
var procEscapes = map[string]string{
	"setsid":      `setsid sleep 1000 >/dev/null 2>&1 & echo $! > "$F"`,
	"set -m":      `set -m; sleep 1000 >/dev/null 2>&1 & echo $! > "$F"`,
	"double fork": `(sleep 1000 >/dev/null 2>&1 & echo $! > "$F") &`,
}

func TestEscapedProcessesDieWithTheirTask(t *testing.T) {
	t.Parallel()
	for name, escape := range procEscapes {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			c := bgServer(t)
			pidFile := filepath.Join(t.TempDir(), "pid")
			id := bgStart(t, c, "F="+shellQuote(pidFile)+"\n"+escape+"\necho started; sleep 1000")
			pid := readPidFile(t, pidFile)
			if res := c.callTool("KillBgTask", map[string]any{"task_id": id}); isError(res) {
				t.Fatalf("kill: %s", resultText(res))
			}
			waitGone(t, pid)
		})
	}
}

func TestEscapedProcessesDieWithTheServer(t *testing.T) {
	t.Parallel()
	for name, escape := range procEscapes {
		for _, how := range []string{"eof", "sigkill"} {
			t.Run(name+"/"+how, func(t *testing.T) {
				t.Parallel()
				c := startBinary(t, nil)
				c.initialize("2025-11-25")
				dir := t.TempDir()
				bgStart(t, c, "F="+shellQuote(filepath.Join(dir, "bg"))+"\n"+escape)
				c.callTool("Bash", map[string]any{"command": "F=" + shellQuote(filepath.Join(dir, "bash")) + "\n" + escape})
				bgPid := readPidFile(t, filepath.Join(dir, "bg"))
				bashPid := readPidFile(t, filepath.Join(dir, "bash"))
				if how == "eof" {
					c.in.Close()
				} else {
					c.cmd.Process.Signal(syscall.SIGKILL) // the reaper kills them
				}
				waitGone(t, bgPid)
				waitGone(t, bashPid)
			})
		}
	}
}

func TestEscapedProcessesDieWithTheSession(t *testing.T) {
	t.Parallel()
	c := bgServer(t)
	pidFile := filepath.Join(t.TempDir(), "pid")
	c.callTool("Bash", map[string]any{"command": "F=" + shellQuote(pidFile) + "\n" + procEscapes["setsid"]})
	pid := readPidFile(t, pidFile)
	c.in.Close()
	waitGone(t, pid)
}

func TestBashCutKeepsLinesAndTheWholeOutput(t *testing.T) {
	t.Parallel()
	c := startServer(t, "-output-limit", "1000")
	c.initialize("2025-06-18")
	res := c.callTool("Bash", map[string]any{"command": "seq 1 100000"})
	sc := bgStructured(t, res)
	text := resultText(res)
	file, _ := sc["output_file"].(string)
	whole, err := os.ReadFile(file)
	if err != nil || !strings.HasPrefix(string(whole), "1\n2\n") || !strings.HasSuffix(string(whole), "\n99999\n100000\n") {
		t.Fatalf("output file %q: %v, %d bytes", file, err, len(whole))
	}
	if !strings.Contains(text, file) {
		t.Errorf("the reply does not name the file: %q", text)
	}
	out := sc["output"].(string)
	head, tail, ok := strings.Cut(out, "\n[... ")
	if !ok || !strings.HasSuffix(head, "\n") {
		t.Fatalf("head does not end a line: %q", out)
	}
	tail = tail[strings.Index(tail, "...]\n\n")+6:]
	if !strings.HasPrefix(string(whole), head) || !strings.HasSuffix(string(whole), tail) || strings.HasPrefix(tail, "0") {
		t.Errorf("tail does not start a line: %q", tail[:20])
	}
	lines := strings.Count(string(whole), "\n") - strings.Count(head, "\n") - strings.Count(tail, "\n")
	bytesLeft := len(whole) - len(head) - len(tail)
	if sc["omitted_lines"] != float64(lines) || sc["omitted_bytes"] != float64(bytesLeft) {
		t.Errorf("omitted %v lines %v bytes, want %d and %d", sc["omitted_lines"], sc["omitted_bytes"], lines, bytesLeft)
	}
	if want := fmt.Sprintf("[... %d lines (%d bytes) left out", lines, bytesLeft); !strings.Contains(text, want) {
		t.Errorf("the cut does not say %q: %q", want, text)
	}
}

func TestBashTimeoutSaysWhatToDo(t *testing.T) {
	t.Parallel()
	c := bgServer(t)
	res := c.callTool("Bash", map[string]any{"command": "sleep 10", "timeout": 100})
	hint, _ := bgStructured(t, res)["hint"].(string)
	for _, want := range []string{"600000", "BackgroundBash"} {
		if !strings.Contains(hint, want) || !strings.Contains(resultText(res), want) {
			t.Errorf("timeout reply lacks %q: %q / %q", want, hint, resultText(res))
		}
	}
}

func TestBashRunInBackground(t *testing.T) {
	t.Parallel()
	c := bgServer(t)
	res := c.callTool("Bash", map[string]any{"command": "echo bg", "run_in_background": true, "description": "say bg"})
	sc := bgStructured(t, res)
	if isError(res) || sc["task_id"] != 1.0 || !strings.Contains(resultText(res), "Started background task 1") {
		t.Fatalf("run_in_background: %v", res)
	}
	if out, _ := bgReadToEnd(t, c, 1); out != "bg\n" {
		t.Errorf("output %q", out)
	}
}

// procWaitFile waits until the file another process writes ends with suffix.
func procWaitFile(t *testing.T, path, suffix string) {
	t.Helper()
	deadline := time.Now().Add(watchdog)
	for wait := time.Millisecond; ; wait = min(2*wait, 100*time.Millisecond) {
		if b, _ := os.ReadFile(path); strings.HasSuffix(string(b), suffix) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never ended with %q", path, suffix)
		}
		time.Sleep(wait) // polling a file another process writes, bounded by the watchdog
	}
}

func TestBgTailLogAndBriefKill(t *testing.T) {
	t.Parallel()
	c := bgServer(t, "-bg-buffer-bytes", "1000")
	res := c.callTool("BackgroundBash", map[string]any{"command": "seq 1 5000; sleep 1000"})
	logFile, _ := bgStructured(t, res)["log_file"].(string)
	if logFile == "" || !strings.Contains(resultText(res), logFile) {
		t.Fatalf("no log file named: %v", res)
	}
	if list := c.callTool("ListBgTasks", map[string]any{}); !strings.Contains(resultText(list), logFile) {
		t.Errorf("the list does not name the log: %q", resultText(list))
	}
	procWaitFile(t, logFile, "\n5000\n")
	sc := bgStructured(t, c.callTool("ReadBgOutput", map[string]any{"task_id": 1, "tail": 3}))
	if sc["output"] != "4998\n4999\n5000\n" || sc["dropped_bytes"].(float64) == 0 {
		t.Errorf("tail 3: %v", sc)
	}
	if b, _ := os.ReadFile(logFile); !strings.HasPrefix(string(b), "1\n2\n3\n") {
		t.Errorf("log does not hold the whole output: %.20q", b)
	}
	res = c.callTool("BackgroundBash", map[string]any{"command": "seq 1 3000; echo last; sleep 1000"})
	procWaitFile(t, bgStructured(t, res)["log_file"].(string), "\nlast\n")
	res = c.callTool("KillBgTask", map[string]any{"task_id": 2})
	text := resultText(res)
	if !strings.Contains(text, "\nlast\n") || len(text) > 600 || strings.Contains(text, "\n2990\n") {
		t.Errorf("kill reply is not brief: %q", text)
	}
	if !strings.Contains(text, "dropped") || !strings.Contains(text, "complete output is in") {
		t.Errorf("overflow does not name the log: %q", text)
	}
}

func TestBgEndSaidOncePerReply(t *testing.T) {
	t.Parallel()
	c := bgServer(t)
	id := bgStart(t, c, "exit 4")
	bgWaitNote(c, "background task 1 exited with status 4")
	res := bgRead(t, c, id, 0)
	if n := strings.Count(resultText(res), "exited with status 4"); n != 1 {
		t.Errorf("the end is said %d times: %q", n, resultText(res))
	}
	if _, ok := bgStructured(t, res)["notices"]; ok {
		t.Errorf("the notice rides along: %v", res)
	}
}

// BenchmarkBashTrueVsDirect alternates a Bash `true` call to the real binary
// with a direct `bash -c true` spawn, so both see the same machine load, and
// reports the median of each and their ratio.
func BenchmarkBashTrueVsDirect(b *testing.B) {
	p := startBenchProc(b)
	p.roundTrip(b, benchInit)
	call := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"Bash","arguments":{"command":"true"}}}` + "\n"
	var viaTelson, direct []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		p.roundTrip(b, call)
		viaTelson = append(viaTelson, time.Since(start))
		start = time.Now()
		if err := exec.Command("bash", "-c", "true").Run(); err != nil {
			b.Fatal(err)
		}
		direct = append(direct, time.Since(start))
	}
	b.StopTimer()
	median := func(d []time.Duration) float64 {
		slices.Sort(d)
		return float64(d[len(d)/2])
	}
	b.ReportMetric(median(viaTelson), "bash-ns")
	b.ReportMetric(median(direct), "direct-ns")
	b.ReportMetric(median(viaTelson)/median(direct), "ratio")
}
