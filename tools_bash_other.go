//go:build !linux

// tools_bash_other.go: systems without a child subreaper (see tools_bash_linux.go).
package main

func becomeSubreaper() bool { return false }
