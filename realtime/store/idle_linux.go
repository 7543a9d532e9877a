package store

import (
	"runtime"

	"golang.org/x/sys/unix"
)

// lowerThreadPriority ties the calling goroutine to its OS thread for the
// rest of its life and gives the thread the lowest CPU priority (nice 19),
// so background housekeeping runs on CPU time the appender and the network
// leave idle. The thread ends with the goroutine (it never unlocks).
func lowerThreadPriority() {
	runtime.LockOSThread()
	_ = unix.Setpriority(unix.PRIO_PROCESS, unix.Gettid(), 19)
}
