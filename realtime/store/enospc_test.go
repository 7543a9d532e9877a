package store

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"testing"

	"github.com/qmq-go/qmq/pkg/fsutil"
	"github.com/qmq-go/qmq/pkg/protocol"
)

// TestFullDisk fills the disk (through a fault-injecting file layer) in
// every way a write can meet it and checks that appends fail clearly,
// nothing acked is lost, and the store works again when space returns.
func TestFullDisk(t *testing.T) {
	cases := []struct {
		name string
		fail func(*fsutil.FaultFS)
	}{
		{"write", func(f *fsutil.FaultFS) { f.Fail(fsutil.OpWrite, nil) }},
		{"sync", func(f *fsutil.FaultFS) { f.Fail(fsutil.OpSync, nil) }},
		{"partial write", func(f *fsutil.FaultFS) { f.LimitWrites(3000) }},
		{"new segment", func(f *fsutil.FaultFS) { f.Fail(fsutil.OpAllocate|fsutil.OpCreate, nil) }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			ffs := fsutil.NewFaultFS(nil)
			opts := testOptions()
			opts.FS = ffs
			opts.SegmentSize = 1 << 20
			opts.Limits = protocol.DefaultLimits
			opts.Limits.MaxBody = 64 << 10
			opts.Limits.MaxPropertyBytes = 64 << 10
			s := openStore(t, dir, opts)
			pull(t, s, PullRequest{Subject: "d", Group: "g", Consumer: "c", Earliest: true})
			good := appendN(t, s, "d", "ok", 100)
			tc.fail(ffs)
			// Big batches so a new segment is needed soon.
			failed := 0
			for i := 0; i < 20 && failed == 0; i++ {
				var msgs [][]byte
				for k := 0; k < 30; k++ {
					msgs = append(msgs, encode(t, "d", fmt.Sprintf("full-%d-%d", i, k), make([]byte, 4000)))
				}
				res, err := s.Append(context.Background(), msgs)
				if err != nil {
					t.Fatal(err)
				}
				for _, r := range res {
					if r.Err == nil {
						// Stored before the disk filled: it counts as acked.
						good = append(good, msgs[0])
						continue
					}
					if !errors.Is(r.Err, ErrIO) || !errors.Is(r.Err, syscall.ENOSPC) {
						t.Fatalf("error %v is not ErrIO+ENOSPC", r.Err)
					}
					failed++
				}
				if failed == 0 {
					good = good[:len(good)-len(res)]
					for _, r := range res {
						got, err := s.Read("d", r.Seq, 1)
						if err != nil || len(got) != 1 {
							t.Fatalf("stored message unreadable: %v", err)
						}
						good = append(good, got[0].Message)
					}
				}
			}
			if failed == 0 {
				t.Fatal("the full disk never failed an append")
			}
			// A pull that cannot record itself fails clearly and changes nothing.
			if _, err := s.Pull(PullRequest{Subject: "d", Group: "g", Consumer: "c", Max: 1000, KnownPullSeq: -1}); err != nil &&
				(!errors.Is(err, ErrIO) || !errors.Is(err, syscall.ENOSPC)) {
				t.Fatalf("pull on a full disk: %v", err)
			}
			ffs.Heal()
			r := pull(t, s, PullRequest{Subject: "d", Group: "g", Consumer: "c", Max: 1000})
			if len(r.Messages) != len(good) {
				t.Fatalf("pulled %d after space returned, want %d", len(r.Messages), len(good))
			}
			more := appendN(t, s, "d", "again", 50)
			good = append(good, more...)
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			s = openStore(t, dir, testOptionsLike(opts))
			defer s.Close()
			got, err := s.Read("d", 0, 10000)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(good) {
				t.Fatalf("after reopen %d messages, want %d", len(got), len(good))
			}
			for i := range got {
				if msgID(t, got[i].Message) != msgID(t, good[i]) {
					t.Fatalf("message %d: %s want %s", i, msgID(t, got[i].Message), msgID(t, good[i]))
				}
			}
		})
	}
}

func testOptionsLike(o Options) Options {
	o.FS = nil
	return o
}
