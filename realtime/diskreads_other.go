//go:build !linux

package realtime

// threadDiskReads is known on Linux only; elsewhere only the inline pull's
// time sends its actor to the workers.
func threadDiskReads() int64 { return 0 }
