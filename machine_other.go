//go:build !linux

// machine_other.go: systems without the plan-mode sandbox's namespaces (see machine_linux.go),
// where an agent's command in plan mode is refused.
package main

import (
	"fmt"
	"os/exec"
	"runtime"
)

// Elsewhere Bash's EXIT trap writes its directory to descriptor dirFD, which the command could
// write to as well (Linux reads it from the kernel: see machine_linux.go).
const (
	dirTrap       = "trap 'builtin pwd -P >&9' EXIT\n"
	dirFromKernel = false
	dirFD         = 9
)

// watchDir is Linux's only.
func watchDir(int) string { return "" }

func sandbox(*exec.Cmd, string) error {
	return fmt.Errorf("%s has no user namespaces", runtime.GOOS)
}

func runSandbox([]string) int { return 126 }
