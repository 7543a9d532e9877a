package store

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
)

// copyDir copies a store directory file by file (a crash image when the
// store is open: what its files held at that moment), without its LOCK. A
// file that goes away between the listing and its copy (a temporary file
// renamed into place, a segment removed) is left out, as in a crash just
// before it was made.
func copyDir(t testing.TB, from, to string) {
	t.Helper()
	err := filepath.Walk(from, func(p string, fi os.FileInfo, err error) error {
		if errors.Is(err, fs.ErrNotExist) && p != from {
			return nil
		}
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(from, p)
		dst := filepath.Join(to, rel)
		if fi.IsDir() {
			return os.MkdirAll(dst, 0o755)
		}
		if fi.Name() == "LOCK" {
			return nil
		}
		in, err := os.Open(p)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		defer in.Close()
		out, err := os.Create(dst)
		if err != nil {
			return err
		}
		defer out.Close()
		_, err = io.Copy(out, in)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// logBytes reads a store's whole committed message and action logs.
func logBytes(t *testing.T, s *Store) (msgs, acts []byte) {
	t.Helper()
	read := func(rd func(int64, int) (LogChunk, error)) []byte {
		var out []byte
		for off := int64(0); ; {
			c, err := rd(off, 1<<20)
			if err != nil {
				t.Fatal(err)
			}
			if len(c.Data) == 0 {
				return out
			}
			out = append(out, c.Data...)
			off = c.Offset + int64(len(c.Data))
		}
	}
	return read(s.Source().ReadMessageLog), read(s.Source().ReadActionLog)
}

// waitActionsCommitted waits until s has committed actions past above and
// every action appended so far (a pull's and an ack's actions may be
// flushed apart: waiting for the first one past above let an ack be
// missing from the copy a test then made).
func waitActionsCommitted(t *testing.T, s *Store, above int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, a := s.CommittedEnds(); a > above && a >= s.actions.end() {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("actions never committed")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// An old master holds records and actions its promoted replica never got;
// Truncate cuts it back to the promotion point and it then copies the new
// master byte for byte: from its checkpoint when that lies below the point
// (a crash image), or rebuilt from the logs when it does not (a closed
// store checkpoints at its end).
func TestTruncateRejoinsDivergentCopy(t *testing.T) {
	for _, crashed := range []bool{true, false} {
		t.Run(fmt.Sprintf("crashed=%v", crashed), func(t *testing.T) {
			opts := replicaOptions()
			dirM := t.TempDir()
			m := openStore(t, dirM, opts)
			for i := 0; i < 30; i++ {
				appendAll(t, m, encode(t, "s", fmt.Sprint("m", i), make([]byte, 3000)))
			}
			res, err := m.Pull(PullRequest{Subject: "s", Group: "g", Consumer: "c", Max: 10, KnownPullSeq: -1, Earliest: true})
			if err != nil || len(res.Messages) != 10 {
				t.Fatalf("pull: %d, %v", len(res.Messages), err)
			}
			if _, err := m.Ack(AckRequest{Subject: "s", Group: "g", Consumer: "c", First: 0, Last: 9}); err != nil {
				t.Fatal(err)
			}
			if err := m.Checkpoint(); err != nil {
				t.Fatal(err)
			}
			ropts := opts
			ropts.Replica = true
			r := openStore(t, t.TempDir(), ropts)
			defer r.Close()
			replicate(t, m, r, 1<<20)
			pm, pa := r.CommittedEnds()

			// The old master goes on alone: messages, a pull and an ack
			// the replica never sees.
			for i := 0; i < 10; i++ {
				appendAll(t, m, encode(t, "s", fmt.Sprint("lost", i), make([]byte, 2000)))
			}
			appendAll(t, m, encode(t, "other", "lost-other", []byte("x")))
			if _, err := m.Pull(PullRequest{Subject: "s", Group: "g", Consumer: "c", Max: 25, KnownPullSeq: 9}); err != nil {
				t.Fatal(err)
			}
			if _, err := m.Ack(AckRequest{Subject: "s", Group: "g", Consumer: "c", First: 10, Last: 20}); err != nil {
				t.Fatal(err)
			}
			waitActionsCommitted(t, m, pa)
			oldDir := dirM
			if crashed {
				oldDir = t.TempDir()
				copyDir(t, dirM, oldDir)
			}
			if err := m.Close(); err != nil {
				t.Fatal(err)
			}

			// The replica is promoted and takes its own writes.
			if err := r.Replica().Promote(); err != nil {
				t.Fatal(err)
			}
			for i := 0; i < 5; i++ {
				appendAll(t, r, encode(t, "s", fmt.Sprint("new", i), make([]byte, 1000)))
			}
			if _, err := r.Pull(PullRequest{Subject: "s", Group: "g", Consumer: "c", Max: 3, KnownPullSeq: 9}); err != nil {
				t.Fatal(err)
			}
			if _, err := r.Ack(AckRequest{Subject: "s", Group: "g", Consumer: "c", First: 10, Last: 11}); err != nil {
				t.Fatal(err)
			}
			waitActionsCommitted(t, r, pa)

			rep, err := Truncate(oldDir, ropts, pm, pa, zaptest.NewLogger(t))
			if err != nil {
				t.Fatal(err)
			}
			if rep.MessageCut <= 0 || rep.ActionCut <= 0 || rep.CheckpointKept != crashed || rep.Wiped {
				t.Fatalf("truncate report %+v (crashed %v)", rep, crashed)
			}
			again, err := Truncate(oldDir, ropts, pm, pa, nil)
			if err != nil || again.MessageCut != 0 || again.ActionCut != 0 {
				t.Fatalf("second truncate: %+v, %v", again, err)
			}
			x := openStore(t, oldDir, ropts)
			defer x.Close()
			if e, a := x.CommittedEnds(); e != pm || a != pa {
				t.Fatalf("truncated store ends at (%d, %d), want (%d, %d)", e, a, pm, pa)
			}
			replicate(t, r, x, 1<<20)
			if a, b := stateOf(x), stateOf(r); !reflect.DeepEqual(a, b) {
				t.Fatalf("rejoined copy differs:\n got %+v\nwant %+v", a, b)
			}
			xm, xa := logBytes(t, x)
			rm, ra := logBytes(t, r)
			if !bytes.Equal(xm, rm) || !bytes.Equal(xa, ra) {
				t.Fatalf("logs differ: message %d vs %d bytes, action %d vs %d bytes", len(xm), len(rm), len(xa), len(ra))
			}
			got, err := x.Read("s", 0, 100)
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range got {
				if bytes.Contains(p.Message, []byte("lost")) {
					t.Fatalf("a truncated message survived at seq %d", p.ConsumeSeq)
				}
			}
			if len(got) != 35 {
				t.Fatalf("rejoined copy has %d messages of s, want 35", len(got))
			}
			// The copy can be promoted in turn and serves the group's consumer
			// from where the new master left it.
			if err := x.Replica().Promote(); err != nil {
				t.Fatal(err)
			}
			pr, err := x.Pull(PullRequest{Subject: "s", Group: "g", Consumer: "c", Max: 100, KnownPullSeq: 12})
			if err != nil {
				t.Fatal(err)
			}
			if len(pr.Messages) != 22 || pr.Messages[0].ConsumeSeq != 13 {
				t.Fatalf("after rejoin and promotion the consumer got %d messages from %d", len(pr.Messages), pr.Messages[0].ConsumeSeq)
			}
		})
	}
}

// Truncating a store whose checkpoint lies past the point and whose action
// log no longer starts at 0 wipes it: its groups cannot be rebuilt.
func TestTruncateWipesWhenGroupsCannotBeRebuilt(t *testing.T) {
	opts := replicaOptions()
	dir := t.TempDir()
	s := openStore(t, dir, opts)
	for i := 0; i < 40; i++ {
		appendAll(t, s, encode(t, "s", fmt.Sprint("m", i), make([]byte, 100)))
	}
	for i := int64(0); i < 40; i++ {
		if _, err := s.Pull(PullRequest{Subject: "s", Group: "g", Consumer: "c", Max: 1, KnownPullSeq: i - 1, Earliest: true}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Ack(AckRequest{Subject: "s", Group: "g", Consumer: "c", First: i, Last: i}); err != nil {
			t.Fatal(err)
		}
	}
	// Enough actions to fill a segment, then a checkpoint deletes it.
	for s.actLog.Start() == 0 {
		for i := 0; i < 1000; i++ {
			if _, err := s.ResetGroup("s", "g", ResetEarliest, time.Time{}); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Checkpoint(); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	if s.actLog.Start() == 0 {
		t.Fatal("the first action segment was not deleted")
	}
	mEnd, aEnd := s.CommittedEnds()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	rep, err := Truncate(dir, opts, mEnd/2, aEnd-1, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Wiped {
		t.Fatalf("report %+v, want wiped", rep)
	}
	x := openStore(t, dir, opts)
	defer x.Close()
	if m, a := x.CommittedEnds(); m != 0 || a != 0 || len(x.Stats().Groups) != 0 {
		t.Fatalf("wiped store ends at (%d, %d) with %d groups", m, a, len(x.Stats().Groups))
	}
}
