// Package msgid generates message ids: 128 bits, a 48-bit Unix millisecond
// timestamp followed by 80 bits that start random each millisecond and count
// up within it, written as 26 characters of Crockford base32 (the ULID
// layout). Ids from one Generator sort in creation order; ids from different
// processes are unique with overwhelming probability and sort by time to
// the millisecond.
package msgid

import (
	crand "crypto/rand"
	"encoding/binary"
	"math/rand/v2"
	"sync"
	"time"
)

// Size is the length of an id string.
const Size = 26

const alphabet = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"

// Generator makes ids. It is safe for concurrent use.
type Generator struct {
	mu   sync.Mutex
	now  func() time.Time
	rng  *rand.ChaCha8
	last int64  // millisecond of the previous id
	hi   uint16 // top 16 of the 80 counting bits
	lo   uint64 // low 64 of the 80 counting bits
}

// New returns a Generator seeded from crypto/rand. now may be nil (time.Now).
func New(now func() time.Time) *Generator {
	var seed [32]byte
	if _, err := crand.Read(seed[:]); err != nil {
		panic("msgid: no entropy: " + err.Error())
	}
	if now == nil {
		now = time.Now
	}
	return &Generator{now: now, rng: rand.NewChaCha8(seed)}
}

var std = New(nil)

// Next returns a new id from the package's shared Generator.
func Next() string { return std.Next() }

// Next returns a new id.
func (g *Generator) Next() string {
	var b [Size]byte
	g.AppendNext(b[:0])
	return string(b[:])
}

// NextAt returns a new id for a message created at now (saving a clock
// read when the caller has the time).
func (g *Generator) NextAt(now time.Time) string {
	var b [Size]byte
	g.appendAt(b[:0], now.UnixMilli())
	return string(b[:])
}

// AppendNext appends a new id to dst.
func (g *Generator) AppendNext(dst []byte) []byte { return g.appendAt(dst, g.now().UnixMilli()) }

// AppendNextN appends n new ids for messages created at now, in order,
// taking the lock once per 32 ids rather than once per id.
func (g *Generator) AppendNextN(dst []byte, now time.Time, n int) []byte {
	type word struct {
		ms int64
		hi uint16
		lo uint64
	}
	var ws [32]word
	ms := now.UnixMilli()
	for n > 0 {
		k := min(n, len(ws))
		g.mu.Lock()
		for i := range k {
			ms = g.advanceLocked(ms)
			ws[i] = word{ms, g.hi, g.lo}
		}
		g.mu.Unlock()
		for _, w := range ws[:k] {
			dst = appendBase32(dst, pack(w.ms, w.hi, w.lo))
		}
		n -= k
	}
	return dst
}

// advanceLocked moves the generator to the next id of millisecond ms (or
// of its last one, when ms is not later) and returns that id's
// millisecond. g.mu is held.
func (g *Generator) advanceLocked(ms int64) int64 {
	if ms > g.last {
		g.last = ms
		g.hi = uint16(g.rng.Uint64())
		g.lo = g.rng.Uint64()
		return ms
	}
	// Same (or an earlier, after a clock step back) millisecond: count
	// up from the previous id so ids stay ordered.
	g.lo++
	if g.lo == 0 {
		g.hi++
		if g.hi == 0 {
			g.last++ // 2^80 ids in one millisecond: borrow the next one
		}
	}
	return g.last
}

func pack(ms int64, hi uint16, lo uint64) [16]byte {
	var raw [16]byte
	binary.BigEndian.PutUint16(raw[0:2], uint16(ms>>32))
	binary.BigEndian.PutUint32(raw[2:6], uint32(ms))
	binary.BigEndian.PutUint16(raw[6:8], hi)
	binary.BigEndian.PutUint64(raw[8:16], lo)
	return raw
}

func (g *Generator) appendAt(dst []byte, ms int64) []byte {
	g.mu.Lock()
	ms = g.advanceLocked(ms)
	hi, lo := g.hi, g.lo
	g.mu.Unlock()
	return appendBase32(dst, pack(ms, hi, lo))
}

// appendBase32 writes 128 bits as 26 base32 digits, most significant first
// (130 bits of digits: the first digit carries 2 zero bits of padding). The
// bits go in 40-bit groups of 8 digits each, whose digits do not depend on
// one another (the digit-by-digit shift of both words was one long chain):
// 40 ns instead of 48 here.
func appendBase32(dst []byte, raw [16]byte) []byte {
	hi := binary.BigEndian.Uint64(raw[0:8])
	lo := binary.BigEndian.Uint64(raw[8:16])
	const mask40 = 1<<40 - 1
	var out [Size]byte
	put8(out[18:26], lo&mask40)
	put8(out[10:18], (lo>>40|hi<<24)&mask40)
	put8(out[2:10], (hi>>16)&mask40)
	out[1] = alphabet[(hi>>56)&31]
	out[0] = alphabet[hi>>61]
	return append(dst, out[:]...)
}

// put8 writes the 40 bits of v as 8 base32 digits.
func put8(dst []byte, v uint64) {
	_ = dst[7]
	dst[0] = alphabet[(v>>35)&31]
	dst[1] = alphabet[(v>>30)&31]
	dst[2] = alphabet[(v>>25)&31]
	dst[3] = alphabet[(v>>20)&31]
	dst[4] = alphabet[(v>>15)&31]
	dst[5] = alphabet[(v>>10)&31]
	dst[6] = alphabet[(v>>5)&31]
	dst[7] = alphabet[v&31]
}

// Time returns the creation time encoded in id, or false when id is not an
// id of this package.
func Time(id string) (time.Time, bool) {
	if len(id) != Size {
		return time.Time{}, false
	}
	var ms int64
	for i := 0; i < 10; i++ {
		v := decodeDigit(id[i])
		if v < 0 {
			return time.Time{}, false
		}
		ms = ms<<5 | int64(v)
	}
	// The first 10 digits hold 50 bits: 2 zero bits of padding, then the
	// 48-bit time.
	return time.UnixMilli(ms), true
}

func decodeDigit(c byte) int {
	for i := 0; i < len(alphabet); i++ {
		if alphabet[i] == c {
			return i
		}
	}
	return -1
}
