//go:build !linux

// tools_bash_other.go: systems without the plan-mode sandbox's namespaces
// (see tools_bash_linux.go).
package main

import (
	"fmt"
	"os/exec"
	"runtime"
)

func userNamespace(cmd *exec.Cmd) error {
	return fmt.Errorf("%s has no user namespaces", runtime.GOOS)
}

func readOnlyMounts() error { return userNamespace(nil) }
