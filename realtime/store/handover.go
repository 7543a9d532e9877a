package store

// FlushActions writes and syncs the pulls, acks and consumer events
// buffered in memory (actionFlushLoop does so every ActionFlushInterval),
// so they are committed and a slave can copy them now: a master handing
// its group over calls it once it stopped taking pulls and acks.
func (s *Store) FlushActions() error {
	if s.isClosed() {
		return ErrClosed
	}
	return s.actions.flush()
}
