package store

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/qmq-go/qmq/pkg/protocol"
	"github.com/qmq-go/qmq/pkg/testutil"
)

func TestAppendReadReopen(t *testing.T) {
	for _, flush := range []FlushPolicy{FlushSync, FlushAsync} {
		t.Run(string(flush), func(t *testing.T) {
			dir := t.TempDir()
			opts := testOptions()
			opts.Flush = flush
			var mu sync.Mutex
			var notified []string
			opts.OnAppend = func(subject string, next int64) {
				mu.Lock()
				notified = append(notified, fmt.Sprint(subject, next))
				mu.Unlock()
			}
			s := openStore(t, dir, opts)
			s.Watch("orders")
			a := appendN(t, s, "orders", "a", 120)
			b := appendN(t, s, "users", "b", 30)
			res := appendAll(t, s, encode(t, "orders", "x", []byte("x")))
			if res[0].Seq != 120 {
				t.Fatalf("seq %d", res[0].Seq)
			}
			mu.Lock()
			n := len(notified)
			mu.Unlock()
			if n == 0 {
				t.Fatal("OnAppend never called")
			}
			check := func(s *Store) {
				got, err := s.Read("orders", 0, 1000)
				if err != nil || len(got) != 121 {
					t.Fatalf("read orders: %d, %v", len(got), err)
				}
				for i, p := range got[:120] {
					if p.ConsumeSeq != int64(i) || !bytes.Equal(p.Message, a[i]) {
						t.Fatalf("orders %d differs", i)
					}
				}
				got, _ = s.Read("users", 10, 5)
				if len(got) != 5 || !bytes.Equal(got[0].Message, b[10]) {
					t.Fatalf("users read: %d", len(got))
				}
				want := int64(0)
				for _, m := range b {
					want += int64(len(m) + recordOverhead)
				}
				for _, st := range s.Stats().Subjects {
					if st.Subject == "users" && (st.Bytes != want || st.Entries != 30 || st.MinSeq != 0 || st.NextSeq != 30) {
						t.Fatalf("users stats %+v, want %d bytes", st, want)
					}
				}
			}
			check(s)
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			testutil.RequirePrivateTree(t, dir)
			s = openStore(t, dir, opts)
			defer s.Close()
			if r := s.Stats().Open; r.MessagesReplayed != 0 {
				t.Fatalf("clean reopen replayed %d messages", r.MessagesReplayed)
			}
			check(s)
			res = appendAll(t, s, encode(t, "orders", "y", []byte("y")))
			if res[0].Seq != 121 {
				t.Fatalf("seq after reopen %d", res[0].Seq)
			}
		})
	}
}

func TestAppendRejectsBadMessages(t *testing.T) {
	s := openStore(t, t.TempDir(), testOptions())
	defer s.Close()
	good := encode(t, "orders", "1", []byte("ok"))
	bad := bytes.Clone(good)
	bad[len(bad)-1] ^= 1 // CRC mismatch
	lim := protocol.DefaultLimits
	lim.MaxBody = 100 << 20
	big, err := protocol.AppendMessage(nil, &protocol.Message{Subject: "orders", ID: "big", Body: make([]byte, 5<<20)}, lim)
	if err != nil {
		t.Fatal(err)
	}
	sysOK := encode(t, protocol.RetrySubject("orders", "g"), "r", []byte("retry"))
	res, err := s.Append(context.Background(), [][]byte{good, bad, big, []byte("junk"), sysOK})
	if err != nil {
		t.Fatal(err)
	}
	if res[0].Err != nil || res[4].Err != nil {
		t.Fatalf("valid messages failed: %v %v", res[0].Err, res[4].Err)
	}
	if !errors.Is(res[1].Err, protocol.ErrInvalid) && !errors.Is(res[1].Err, protocol.ErrChecksum) {
		t.Fatalf("bad crc: %v", res[1].Err)
	}
	if !errors.Is(res[2].Err, protocol.ErrTooLarge) {
		t.Fatalf("too large: %v", res[2].Err)
	}
	if res[3].Err == nil {
		t.Fatal("junk accepted")
	}
	if st := s.Stats(); st.Appended != 2 || st.Rejected != 3 {
		t.Fatalf("stats appended %d rejected %d", st.Appended, st.Rejected)
	}
	if _, err := s.Pull(PullRequest{Subject: "bad subject!", Group: "g", Consumer: "c", Max: 1}); !errors.Is(err, ErrInvalidRequest) {
		t.Fatalf("invalid subject pull: %v", err)
	}
}

func TestAppendRejectsInvalidSubject(t *testing.T) {
	s := openStore(t, t.TempDir(), testOptions())
	defer s.Close()
	m := encode(t, "abc", "1", []byte("x"))
	copy(m[25:28], "a/c") // subject bytes start after the 24-byte prefix and its length
	binary.BigEndian.PutUint32(m, protocol.Checksum(m[4:]))
	sys := encode(t, "ok", "2", nil)
	res, err := s.Append(context.Background(), [][]byte{m, sys})
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(res[0].Err, protocol.ErrInvalid) || res[1].Err != nil {
		t.Fatalf("results %v %v", res[0].Err, res[1].Err)
	}
	if _, err := s.Read("a/c", 0, 1); !errors.Is(err, ErrUnknownSubject) {
		t.Fatalf("invalid subject stored: %v", err)
	}
}

// TestAppendTimesNeverGoBack: a clock that jumps back, even across a
// restart, does not make append times decrease (ResetTime and retention by
// age rely on it).
func TestAppendTimesNeverGoBack(t *testing.T) {
	clock := newTestClock()
	opts := testOptions()
	opts.Clock = clock.Now
	dir := t.TempDir()
	s := openStore(t, dir, opts)
	appendAll(t, s, encode(t, "a", "1", nil))
	clock.Add(-time.Hour)
	appendAll(t, s, encode(t, "a", "2", nil))
	s.Close()
	clock.Add(-time.Hour)
	s = openStore(t, dir, opts)
	defer s.Close()
	appendAll(t, s, encode(t, "a", "3", nil))
	got, err := s.Read("a", 0, 10)
	if err != nil || len(got) != 3 {
		t.Fatalf("read %d, %v", len(got), err)
	}
	if got[1].Timestamp < got[0].Timestamp || got[2].Timestamp < got[1].Timestamp {
		t.Fatalf("append times went back: %d %d %d", got[0].Timestamp, got[1].Timestamp, got[2].Timestamp)
	}
}
