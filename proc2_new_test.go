// proc2_new_test.go tests what the proc2 branch added: the working
// directory found after every way a command can change it, and escaped
// processes that cleared their environment dying with the server.
package main

import (
	"os"
	"path/filepath"
	"testing"
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
