//go:build !linux

package realtime

// makeHugeSlots returns n zeroed uint64s (huge pages are asked for on
// Linux only).
func makeHugeSlots(n int) []uint64 { return make([]uint64, n) }
