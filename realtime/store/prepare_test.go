package store

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/qmq-go/qmq/pkg/segment"
	"github.com/qmq-go/qmq/pkg/testutil"
)

// A subject whose consume-log buffer is half full gets its directory and
// first file in the background, before the write that empties the full
// buffer (none happens here: no subject reaches a full buffer and no
// checkpoint runs), so that write does not create them on the appender
// goroutine. A subject with a few entries is left for the checkpoint. The
// store reopens with everything in place.
func TestStore_FillingSubjectsConsumeLogsPreparedInTheBackground(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir, testOptions())
	const filling, perFilling = 20, pendingPrepareBytes/entryWidth + 10 // past half, short of full
	var msgs [][]byte
	for k := range perFilling {
		for i := range filling {
			msgs = append(msgs, encode(t, fmt.Sprintf("prep.s%d", i), fmt.Sprint("m", i, "-", k), []byte("x")))
		}
	}
	msgs = append(msgs, encode(t, "prep.few", "few-1", []byte("x")))
	appendAll(t, s, msgs...)
	first := func(subject string) string {
		return filepath.Join(dir, "consumelog", dirName(subject), segment.FileName(0))
	}
	testutil.CheckFor(t, 30*time.Second, 5*time.Millisecond, func() error {
		for i := range filling {
			if _, err := os.Stat(first(fmt.Sprintf("prep.s%d", i))); err != nil {
				return err
			}
		}
		return nil
	})
	if _, err := os.Stat(filepath.Dir(first("prep.few"))); !os.IsNotExist(err) {
		t.Fatalf("a subject with one entry was prepared (or stat failed): %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openStore(t, dir, testOptions())
	defer s.Close()
	for i := range filling {
		subject := fmt.Sprintf("prep.s%d", i)
		if got, _ := s.Read(subject, 0, 2*perFilling); len(got) != perFilling {
			t.Fatalf("after reopening, %s reads %d messages, want %d", subject, len(got), perFilling)
		}
		if fi, err := os.Stat(first(subject)); err != nil || fi.Size() != perFilling*entryWidth {
			t.Fatalf("after reopening, %s's consume log: %v, %v", subject, fi, err)
		}
	}
	if got, _ := s.Read("prep.few", 0, 10); len(got) != 1 {
		t.Fatalf("after reopening, prep.few reads %d messages", len(got))
	}
}
