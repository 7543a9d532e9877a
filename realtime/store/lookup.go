package store

// Lookup answers questions about stored messages, for tools and the
// broker's admin API: where the copies of a message are (the message index,
// msgindex.go) and where one stands in each consumer group (delivery.go).
// Store.Lookup returns it.
type Lookup struct{ s *Store }

// Lookup returns the store's lookups.
func (s *Store) Lookup() Lookup { return Lookup{s} }

// ByID returns the stored copies of the message with id (the original and
// any retry or dead-letter copy of it), oldest first, at most 1,000
// (indexMaxFound). It waits briefly (up to indexCatchUp) for the index to
// cover what is committed. The error is ErrNoIndex when the store keeps no
// index (Options.NoMessageIndex).
func (l Lookup) ByID(id string) ([]Found, error) { return l.s.find(indexKindID, id) }

// ByKey returns the stored messages whose property protocol.PropKey is
// key, oldest first, at most indexMaxFound; like ByID otherwise.
func (l Lookup) ByKey(key string) ([]Found, error) { return l.s.find(indexKindKey, key) }

// Deliveries reports, for every consumer group of subject (broadcast
// subscribers left out), where the message at consume sequence seq
// stands: read from the groups' cursors, returned queues and the un-acked
// part of their consumers' pull logs (at most maxDeliveryScan entries
// each). Groups are sorted by name.
func (l Lookup) Deliveries(subject string, seq int64) ([]Delivery, error) {
	return l.s.deliveries(subject, seq)
}
