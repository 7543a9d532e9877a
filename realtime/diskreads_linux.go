package realtime

import "golang.org/x/sys/unix"

// threadDiskReads returns how many times the calling thread has read from
// a block device (getrusage RUSAGE_THREAD, ru_inblock): a read served from
// the page cache does not count. The caller locks its goroutine to the
// thread between two calls.
func threadDiskReads() int64 {
	var ru unix.Rusage
	if unix.Getrusage(unix.RUSAGE_THREAD, &ru) != nil {
		return 0
	}
	return ru.Inblock
}
