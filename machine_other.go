//go:build !linux

// machine_other.go: systems without the plan-mode sandbox's namespaces (see machine_linux.go),
// where an agent's command in plan mode is refused.
package main

import (
	"fmt"
	"os/exec"
	"runtime"
)

func sandbox(*exec.Cmd, string) error {
	return fmt.Errorf("%s has no user namespaces", runtime.GOOS)
}

func runSandbox([]string) int { return 126 }
