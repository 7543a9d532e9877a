//go:build !linux

package store

// lowerThreadPriority is Linux-only (per-thread nice); elsewhere background
// housekeeping runs at the process's priority.
func lowerThreadPriority() {}
