package store

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/qmq-go/qmq/pkg/segment"
)

// logBases lists the message-log segments of the store in dir.
func logBases(t *testing.T, dir string) []int64 {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(dir, logDir))
	if err != nil {
		t.Fatal(err)
	}
	var bases []int64
	for _, e := range ents {
		if b, ok := segment.ParseFileName(e.Name()); ok {
			bases = append(bases, b)
		}
	}
	return bases
}

// lastSegment returns the path and base of the last message-log segment.
func lastSegment(t *testing.T, dir string) (string, int64) {
	t.Helper()
	bases := logBases(t, dir)
	if len(bases) == 0 {
		t.Fatal("no message-log segments")
	}
	b := bases[len(bases)-1]
	return filepath.Join(dir, logDir, segment.FileName(b)), b
}

// logRecordBytes returns the bytes of one message-log record, as the store
// writes it.
func logRecordBytes(t *testing.T, appendMillis int64, msg []byte) []byte {
	t.Helper()
	l, err := segment.OpenLog(t.TempDir(), logOptions(Options{SegmentSize: 1 << 20}.withDefaults(), nil))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	b := l.NewBatch()
	var head [appendTimeSize]byte
	if _, err := b.Append(logKindMessage, appendTime(head[:], appendMillis), msg); err != nil {
		t.Fatal(err)
	}
	if err := l.Write(b); err != nil {
		t.Fatal(err)
	}
	rec := make([]byte, b.End())
	if err := l.ReadAt(rec, 0); err != nil {
		t.Fatal(err)
	}
	return rec
}
