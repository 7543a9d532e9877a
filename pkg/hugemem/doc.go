// Package hugemem hands out memory that the kernel may back with
// transparent huge pages (2 MiB on x86-64 and arm64), for data read or
// written at random all over a large area: a table probed once per message,
// or thousands of per-subject buffers each written one entry at a time.
// With 4 KiB pages such an access is a TLB miss on top of a cache miss, and
// on a virtual machine the miss walks two sets of page tables.
//
// The memory comes from the Go heap, so the collector frees it as usual and
// nothing can be used after it is unmapped. Where the kernel allows it
// (Linux with transparent huge pages in "madvise" or "always" mode) the
// 2 MiB-aligned part of each allocation is advised with MADV_HUGEPAGE, and
// what is already faulted in is collapsed (MADV_COLLAPSE); elsewhere the
// memory has ordinary pages, which costs only speed.
//
//	Bytes(n), Uint64s(n)   one allocation, advised
//	Slab                   fixed-size slots carved from advised chunks
//
// A Slab exists for buffers that come and go (a subject's consume-log
// buffer is taken on its first message and given back when it goes idle):
// a slot given back is handed out again before a new chunk is made, and a
// chunk whose slots are all free is dropped for the collector. Once its
// last chunk is half used, a Slab makes the next one ahead on a goroutine
// of its own and faults its pages in, so the kernel's zeroing of fresh
// huge pages stays off the path of whoever fills the chunk.
package hugemem
