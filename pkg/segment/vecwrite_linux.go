package segment

import (
	"io"

	"github.com/qmq-go/qmq/pkg/fsutil"
	"golang.org/x/sys/unix"
)

// writeVec writes pieces at off in f: pwritev(2), at most maxIovecs
// pieces a call, when f has a descriptor; else one WriteAt a piece.
func writeVec(f fsutil.File, pieces [][]byte, off int64) error {
	fd, ok := f.(interface{ Fd() uintptr })
	if !ok {
		for _, p := range pieces {
			if _, err := f.WriteAt(p, off); err != nil {
				return err
			}
			off += int64(len(p))
		}
		return nil
	}
	var iov [][]byte
	for len(pieces) > 0 {
		k := min(len(pieces), maxIovecs)
		iov = append(iov[:0], pieces[:k]...)
		pieces = pieces[k:]
		for len(iov) > 0 {
			n, err := unix.Pwritev(int(fd.Fd()), iov, off)
			if err == unix.EINTR {
				continue
			}
			if err != nil {
				return err
			}
			if n == 0 {
				return io.ErrShortWrite
			}
			off += int64(n)
			// Drop what was written (a short write leaves the rest).
			for n > 0 {
				if n >= len(iov[0]) {
					n -= len(iov[0])
					iov = iov[1:]
				} else {
					iov[0] = iov[0][n:]
					n = 0
				}
			}
		}
	}
	return nil
}
