package busypoll

// GiveUp is how many spins in a row may miss before a Budget stops
// spinning; Probe is how often (in chances) a stopped Budget tries again.
const (
	GiveUp = 8
	Probe  = 64
)

// Budget decides, for one connection, whether to spin at each chance. Its
// zero value spins. It is not safe for concurrent use: it belongs to
// whoever reads the connection.
type Budget struct {
	misses, skipped int
}

// Should reports whether to spin at this chance: always while spins catch
// bytes, and once every Probe chances after GiveUp misses in a row.
func (b *Budget) Should() bool {
	if b.misses < GiveUp {
		return true
	}
	b.skipped++
	if b.skipped < Probe {
		return false
	}
	b.skipped = 0
	return true
}

// Record records whether a spin caught bytes.
func (b *Budget) Record(caught bool) {
	if caught {
		b.misses = 0
	} else if b.misses < GiveUp {
		b.misses++
	}
}
