//go:build !linux

package hugemem

// mapChunk returns n bytes from the heap (mappings are used on Linux only).
func mapChunk(n int) ([]byte, bool) { return make([]byte, n), false }

func releaseChunk([]byte) {}

func unmapChunk([]byte) {}
