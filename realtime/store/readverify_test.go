package store

import (
	"bytes"
	"os"
	"testing"

	"github.com/qmq-go/qmq/pkg/protocol"
)

// flipByte flips one bit of the byte at off in the file at path, under a
// running store as damage on disk would.
func flipByte(t *testing.T, path string, off int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var b [1]byte
	if _, err := f.ReadAt(b[:], off); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0x01
	if _, err := f.WriteAt(b[:], off); err != nil {
		t.Fatal(err)
	}
}

// pullsBack pulls every message of subject as group and fails unless they
// are exactly want, by id.
func pullsBack(t *testing.T, s *Store, subject, group string, want map[string][]byte) {
	t.Helper()
	got := pullAll(t, s, subject, group)
	if len(got) != len(want) {
		t.Fatalf("read back %d messages, want %d", len(got), len(want))
	}
	for id, m := range want {
		if !bytes.Equal(got[id], m) {
			t.Fatalf("message %s read back differs", id)
		}
	}
}

// pullAll pulls everything of subject for a new group and returns the
// served messages by id.
func pullAll(t *testing.T, s *Store, subject, group string) map[string][]byte {
	t.Helper()
	r := pull(t, s, PullRequest{Subject: subject, Group: group, Consumer: "c", Earliest: true, Max: 1000})
	got := make(map[string][]byte)
	for _, m := range r.Messages {
		v, err := protocol.ParseMessageNoCRC(m.Message)
		if err != nil {
			t.Fatalf("served message %d does not parse: %v", m.ConsumeSeq, err)
		}
		got[string(v.ID)] = append([]byte(nil), m.Message...)
	}
	return got
}

// TestReadVerification checks the rule of "Reads" in doc.go: records of an
// earlier run are verified with their CRC when read; records of this run
// have their header and sequence checked but not their CRC (the consumer's
// message CRC catches damage to them), and are verified in full once a new
// run reads them.
func TestReadVerification(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir, testOptions())
	appendN(t, s, "a", "old", 3)
	oldVictim := appendAll(t, s, encode(t, "a", "old-victim", []byte("old victim body")))[0]
	if err := s.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s2 := openStore(t, dir, testOptions())
	if s2.recoveredMsgEnd <= oldVictim.Offset {
		t.Fatalf("message-log end at open %d, old record at %d", s2.recoveredMsgEnd, oldVictim.Offset)
	}
	newSeq := appendAll(t, s2, encode(t, "a", "new-seq", []byte("new record, sequence damaged")))[0]
	newBody := appendAll(t, s2, encode(t, "a", "new-body", []byte("new record, body damaged")))[0]
	appendN(t, s2, "a", "new", 2)
	if newSeq.Offset < s2.recoveredMsgEnd {
		t.Fatalf("record of this run at %d, below the end at open %d", newSeq.Offset, s2.recoveredMsgEnd)
	}
	if err := s2.Checkpoint(); err != nil { // the next Open replays nothing
		t.Fatal(err)
	}
	if got := pullAll(t, s2, "a", "before"); len(got) != 8 || s2.Stats().CorruptReads != 0 {
		t.Fatalf("undamaged: served %d, corrupt reads %d", len(got), s2.Stats().CorruptReads)
	}

	path, base := lastSegment(t, dir, "messagelog")
	flipByte(t, path, oldVictim.Offset-base+recordMsgOffset+3) // in the message
	flipByte(t, path, newSeq.Offset-base+recordOverhead-16+7)  // the record's sequence
	flipByte(t, path, newBody.Offset-base+recordMsgOffset+3)   // in the message

	got := pullAll(t, s2, "a", "after")
	if _, ok := got["old-victim"]; ok {
		t.Fatal("a damaged record of an earlier run was served")
	}
	if _, ok := got["new-seq"]; ok {
		t.Fatal("a record of this run holding the wrong sequence was served")
	}
	served, ok := got["new-body"]
	if !ok {
		t.Fatal("a record of this run was not served though only its message changed")
	}
	if _, err := protocol.ParseMessage(served); err == nil {
		t.Fatal("the message's own CRC did not catch the damage a consumer would check")
	}
	if n, cr := len(got), s2.Stats().CorruptReads; n != 6 || cr != 2 {
		t.Fatalf("served %d (want 6), corrupt reads %d (want 2)", n, cr)
	}
	if err := s2.Close(); err != nil {
		t.Fatal(err)
	}

	// A new run verifies every record of the earlier ones.
	s3 := openStore(t, dir, testOptions())
	defer s3.Close()
	got = pullAll(t, s3, "a", "next-run")
	for _, id := range []string{"old-victim", "new-seq", "new-body"} {
		if _, ok := got[id]; ok {
			t.Fatalf("damaged record %s served after a restart", id)
		}
	}
	if n, cr := len(got), s3.Stats().CorruptReads; n != 5 || cr != 3 {
		t.Fatalf("after restart: served %d (want 5), corrupt reads %d (want 3)", n, cr)
	}
}

// TestPullRelease checks that a released result's buffers serve later
// pulls correctly and that an unreleased result keeps its messages.
func TestPullRelease(t *testing.T) {
	s := openStore(t, t.TempDir(), testOptions())
	defer s.Close()
	msgs := appendN(t, s, "a", "m", 60)
	kept := pull(t, s, PullRequest{Subject: "a", Group: "g", Consumer: "c", Earliest: true, Max: 20})
	for round := 0; round < 5; round++ {
		r := pull(t, s, PullRequest{Subject: "a", Group: "g2", Consumer: "c", Earliest: true, Max: 20, KnownPullSeq: int64(round*20) - 1})
		if len(r.Messages) != 20 && round < 3 {
			t.Fatalf("round %d: %d messages", round, len(r.Messages))
		}
		for _, m := range r.Messages {
			if string(m.Message) != string(msgs[m.ConsumeSeq]) {
				t.Fatalf("round %d: message %d differs", round, m.ConsumeSeq)
			}
		}
		r.Release()
		if r.Messages != nil {
			t.Fatal("Release left the messages")
		}
		r.Release() // twice is harmless
	}
	for i, m := range kept.Messages {
		if string(m.Message) != string(msgs[i]) {
			t.Fatalf("unreleased message %d changed", i)
		}
	}
}
