package segment

import "errors"

// Errors returned by this package; match them with errors.Is.
var (
	// ErrPoisoned means an earlier write or sync failed; the log refuses
	// writes until Reset. The error also wraps the original failure.
	ErrPoisoned = errors.New("segment: log poisoned by an earlier write failure")
	// ErrCorrupt means a record or file failed validation.
	ErrCorrupt = errors.New("segment: corrupt data")
	// ErrTooLarge means a record cannot fit in one segment.
	ErrTooLarge = errors.New("segment: record larger than a segment")
	// ErrSpansSegments means a run of records (Batch.AppendRun) would
	// cross a segment's end.
	ErrSpansSegments = errors.New("segment: run of records crosses a segment end")
	// ErrNoRecord means there is no record at the offset (past the end, in a
	// deleted segment, or in the zero rest of a segment).
	ErrNoRecord = errors.New("segment: no record at offset")
	// ErrNewSegment means the writer could not create the next segment
	// file (a full disk at fallocate): nothing of the write reached that
	// segment, and Reset to where the batch started takes it back whole.
	ErrNewSegment = errors.New("segment: cannot create a segment")
	// ErrClosed means the log was closed.
	ErrClosed = errors.New("segment: closed")
)

// poisoned wraps the first failure so errors.Is finds both it and
// ErrPoisoned.
type poisoned struct{ cause error }

func (p *poisoned) Error() string   { return ErrPoisoned.Error() + ": " + p.cause.Error() }
func (p *poisoned) Unwrap() []error { return []error{ErrPoisoned, p.cause} }
