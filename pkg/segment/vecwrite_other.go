//go:build !linux

package segment

import "github.com/qmq-go/qmq/pkg/fsutil"

// writeVec writes pieces at off in f, one WriteAt a piece.
func writeVec(f fsutil.File, pieces [][]byte, off int64) error {
	for _, p := range pieces {
		if _, err := f.WriteAt(p, off); err != nil {
			return err
		}
		off += int64(len(p))
	}
	return nil
}
