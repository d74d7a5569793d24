// proc2_new_test.go tests what the proc2 branch added: the working
// directory found after every way a command can change it, and escaped
// processes that cleared their environment dying with the server.
package main

import (
	"bytes"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestBashWorkingDirectoryAfterEveryFormOfCd(t *testing.T) {
	t.Parallel()
	dir, _ := filepath.EvalSymlinks(t.TempDir())
	script := filepath.Join(dir, "go-there.sh")
	os.WriteFile(script, []byte("cd "+shellQuote(dir)+"\n"), 0o600)
	forms := map[string]string{
		"cd":        "cd " + dir,
		"quoted":    "c''d " + dir,
		"escaped":   `c\d ` + dir,
		"expansion": "x=c; ${x}d " + dir,
		"eval":      "eval cd " + dir,
		"source":    "source " + script,
		"dot":       ". " + script,
		"pushd":     "pushd " + dir,
		"braces":    "{ cd " + dir + "; }",
		"exit":      "cd " + dir + "; exit 3",
	}
	for name, command := range forms {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			c := startServer(t)
			c.initialize("2025-11-25")
			res := c.callTool("Bash", map[string]any{"command": command})
			if cwd := bgStructured(t, res)["cwd"]; cwd != dir {
				t.Errorf("%s: cwd %v, want %s", command, cwd, dir)
			}
			if text := resultText(c.callTool("Bash", map[string]any{"command": "pwd"})); text != dir+"\n" {
				t.Errorf("%s: next command runs in %q", command, text)
			}
		})
	}
}

func TestMayChangeDir(t *testing.T) {
	for command, want := range map[string]bool{
		"true": false, "ls -la /tmp": false, "go test ./...": false, "git status && make": false,
		"cd /tmp": true, "X=1 cd /tmp": true, "echo a;cd /": true, "(pushd x)": true,
		"popd": true, ". env.sh": true, "source env.sh": true, "eval x": true,
		"c''d /": true, `c\d /`: true, "$X /": true, "`echo cd` /": true, "c? /": true, "c{d,} /": true,
		"./cd /": false, "/bin/cd": false, "abcd /": false,
	} {
		if got := mayChangeDir(command); got != want {
			t.Errorf("mayChangeDir(%q) = %v, want %v", command, got, want)
		}
	}
}

// proc2Parent is pid's parent, from /proc.
func proc2Parent(t *testing.T, pid int) int {
	t.Helper()
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		t.Fatal(err)
	}
	fields := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
	parent, _ := strconv.Atoi(fields[1])
	return parent
}

// An escapee that left its group and cleared its environment carries no
// marker: the subreaper makes it telson's child, killed at the server's end.
func TestEscapedWithoutEnvironmentDiesWithTheServer(t *testing.T) {
	t.Parallel()
	if runtime.GOOS != "linux" {
		t.Skip("a child subreaper needs Linux")
	}
	for _, tool := range []string{"BackgroundBash", "Bash"} {
		t.Run(tool, func(t *testing.T) {
			t.Parallel()
			c := startBinary(t, nil)
			c.initialize("2025-11-25")
			pidFile := filepath.Join(t.TempDir(), "pid")
			escape := "setsid env -i sh -c 'echo $$ > " + pidFile + "; exec sleep 1000' >/dev/null 2>&1 &"
			if res := c.callTool(tool, map[string]any{"command": escape}); isError(res) {
				t.Fatalf("start: %s", resultText(res))
			}
			pid := readPidFile(t, pidFile)
			if env, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ"); bytes.Contains(env, []byte(markerEnv)) {
				t.Fatalf("the escapee kept its marker: %q", env)
			}
			waitParent(t, pid, c.cmd.Process.Pid)
			c.in.Close()
			waitGone(t, pid)
		})
	}
}

// waitParent waits until pid, orphaned, has been re-parented to parent.
func waitParent(t *testing.T, pid, parent int) {
	t.Helper()
	deadline := time.Now().Add(watchdog)
	for wait := time.Millisecond; proc2Parent(t, pid) != parent; wait = min(2*wait, 100*time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("process %d has parent %d, not telson %d", pid, proc2Parent(t, pid), parent)
		}
		time.Sleep(wait) // polling an external process, bounded by the watchdog
	}
}
