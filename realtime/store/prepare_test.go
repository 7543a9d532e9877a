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

// New subjects' consume-log directories and first files are created in the
// background, long before their first write (here: none happens, as each
// subject's few entries stay buffered and no checkpoint runs), so that
// write does not create them on the appender goroutine; the store reopens
// with everything in place.
func TestStore_NewSubjectsConsumeLogsPreparedInTheBackground(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir, testOptions())
	const subjects = 200
	var msgs [][]byte
	for i := range subjects {
		msgs = append(msgs, encode(t, fmt.Sprintf("prep.s%d", i), fmt.Sprint("m", i), []byte("x")))
	}
	appendAll(t, s, msgs...)
	first := func(i int) string {
		return filepath.Join(dir, "consumelog", dirName(fmt.Sprintf("prep.s%d", i)), segment.FileName(0))
	}
	testutil.CheckFor(t, 30*time.Second, 5*time.Millisecond, func() error { // the loop runs at nice 19: allow for a busy machine
		for i := range subjects {
			if _, err := os.Stat(first(i)); err != nil {
				return err
			}
		}
		return nil
	})
	for i := range subjects {
		if got, _ := s.Read(fmt.Sprintf("prep.s%d", i), 0, 10); len(got) != 1 {
			t.Fatalf("subject %d reads %d messages", i, len(got))
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openStore(t, dir, testOptions())
	defer s.Close()
	for i := range subjects {
		if got, _ := s.Read(fmt.Sprintf("prep.s%d", i), 0, 10); len(got) != 1 {
			t.Fatalf("after reopening, subject %d reads %d messages", i, len(got))
		}
		if fi, err := os.Stat(first(i)); err != nil || fi.Size() != entryWidth {
			t.Fatalf("after reopening, subject %d's consume log: %v, %v", i, fi, err)
		}
	}
}
