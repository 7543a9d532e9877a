package store

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/qmq-go/qmq/pkg/testutil"
)

// TestFullTmpfs fills a real 16 MiB tmpfs (root only; skipped elsewhere):
// appends fail with ENOSPC, every acked message survives, and appends work
// again once space is freed.
func TestFullTmpfs(t *testing.T) {
	mnt := testutil.MountTmpfs(t, "16m")
	filler := filepath.Join(mnt, "filler")
	if err := os.WriteFile(filler, make([]byte, 6<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(mnt, "store")
	opts := testOptions()
	opts.SegmentSize = 1 << 20
	opts.ActionSegmentSize = 256 << 10
	opts.Limits.MaxBody = 64 << 10
	opts.Limits.MaxPropertyBytes = 64 << 10
	opts = withLimits(opts)
	s := openStore(t, dir, opts)
	defer func() { s.Close() }()
	var acked []string
	var full error
	for i := 0; i < 2000 && full == nil; i++ {
		var msgs [][]byte
		for k := 0; k < 8; k++ {
			msgs = append(msgs, encode(t, "full", fmt.Sprintf("m%d-%d", i, k), make([]byte, 4000)))
		}
		res, err := s.Append(context.Background(), msgs)
		if err != nil {
			t.Fatal(err)
		}
		for k, r := range res {
			if r.Err != nil {
				full = r.Err
				continue
			}
			acked = append(acked, msgID(t, msgs[k]))
		}
	}
	if !errors.Is(full, syscall.ENOSPC) || !errors.Is(full, ErrIO) {
		t.Fatalf("filling the disk gave %v", full)
	}
	// Everything acked is readable while full.
	if got := readIDs(t, s, "full"); len(got) != len(acked) {
		t.Fatalf("while full: %d readable, %d acked", len(got), len(acked))
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	more := appendN(t, s, "full", "after", 20)
	for _, m := range more {
		acked = append(acked, msgID(t, m))
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openStore(t, dir, opts)
	got := readIDs(t, s, "full")
	if len(got) != len(acked) {
		t.Fatalf("after reopen %d messages, %d acked", len(got), len(acked))
	}
	for i := range got {
		if got[i] != acked[i] {
			t.Fatalf("message %d is %s, acked %s", i, got[i], acked[i])
		}
	}
}
