package segment

import (
	"encoding/binary"
	"hash/crc32"
	"math/bits"
)

// CRC-32C of a concatenation from the CRCs of its parts, so a record whose
// body already carries a checked CRC of most of its bytes (a pkg/protocol
// message: CRC-32C of everything after its first 4 bytes) gets its record
// CRC without a second pass over those bytes. The record's bytes and CRC
// are exactly those Append writes; only the way the CRC is computed differs.
//
// Arithmetic is in GF(2)[x] modulo the Castagnoli polynomial, in the
// reflected bit order of hash/crc32: bit 31 is x⁰, bit 0 is x³¹. For the
// standard (pre- and post-inverted) CRC values c1 of A and c2 of B,
//
//	crc(A ‖ B) = c1 · x^(8·len(B)) mod P  ⊕  c2
//
// (the inversions cancel: crc(A ‖ B) and c2 see the same final inversion,
// and the initial all-ones register of B's own CRC is the one A's
// inversion left). The multiplication by x^(8·n) is a linear map of c1; a
// CRCCombiner keeps that map for recent lengths as 8 tables of 16 entries
// (the image of each 4-bit group of c1), so combining costs 8 lookups.

// castagnoliReflected is the Castagnoli polynomial in reflected order.
const castagnoliReflected = 0x82F63B78

// gfMul returns a·b mod P (reflected order).
func gfMul(a, b uint32) uint32 {
	var p uint32
	for i := 0; i < 32; i++ {
		// bit 31-i of a is the coefficient of x^i; b holds b·x^i.
		p ^= b & -(a >> (31 - i) & 1)
		b = b>>1 ^ castagnoliReflected&-(b&1)
	}
	return p
}

// x2k[k] is x^(2^k) mod P, k < 64: x^(8n) is the product of x2k[k+3] over
// the bits k of n.
var x2k = func() (t [64]uint32) {
	t[0] = 1 << 30 // x¹
	for k := 1; k < len(t); k++ {
		t[k] = gfMul(t[k-1], t[k-1])
	}
	return t
}()

// xPow8 returns x^(8n) mod P.
func xPow8(n int) uint32 {
	p := uint32(1) << 31 // x⁰
	for k := 3; n != 0; k, n = k+1, n>>1 {
		if n&1 != 0 {
			p = gfMul(x2k[k], p)
		}
	}
	return p
}

// combineCRC returns the CRC-32C of A ‖ B given c1 = crc(A), c2 = crc(B)
// and n = len(B), without tables (tests and rare lengths).
func combineCRC(c1, c2 uint32, n int) uint32 { return gfMul(xPow8(n), c1) ^ c2 }

// combinerSlots is how many lengths a CRCCombiner keeps (direct-mapped).
const combinerSlots = 64

// CRCCombiner combines CRC-32C values (crc(A ‖ B) from crc(A), crc(B) and
// len(B)), keeping the multiplication by x^(8·len(B)) for the lengths it
// saw last. Not safe for concurrent use; the zero value is ready.
type CRCCombiner struct {
	slots [combinerSlots]combinerSlot
}

type combinerSlot struct {
	n   int // len(B) + 1; 0: empty
	tab [8][16]uint32
}

// Combine returns crc(A ‖ B) from c1 = crc(A), c2 = crc(B) and n = len(B).
func (c *CRCCombiner) Combine(c1, c2 uint32, n int) uint32 {
	s := &c.slots[uint(n)%combinerSlots]
	if s.n != n+1 {
		s.fill(n)
	}
	t := &s.tab
	return t[0][c1&15] ^ t[1][c1>>4&15] ^ t[2][c1>>8&15] ^ t[3][c1>>12&15] ^
		t[4][c1>>16&15] ^ t[5][c1>>20&15] ^ t[6][c1>>24&15] ^ t[7][c1>>28] ^ c2
}

// fill makes s the map of multiplying by x^(8n): bit i of c1 (x^(31-i))
// goes to cols[i] = x^(8n)·x^(31-i), and tab[k][v] is the XOR of the
// columns of v's bits in c1's group k.
func (s *combinerSlot) fill(n int) {
	var cols [32]uint32
	col := xPow8(n) // the image of bit 31, x⁰; each lower bit is one more x
	for i := 31; i >= 0; i-- {
		cols[i] = col
		col = col>>1 ^ castagnoliReflected&-(col&1)
	}
	for k := range s.tab {
		t := &s.tab[k]
		t[0] = 0
		for v := 1; v < 16; v++ {
			t[v] = t[v&(v-1)] ^ cols[4*k+bits.TrailingZeros(uint(v))]
		}
	}
	s.n = n + 1
}

// minCombineTail: below this a tail is summed directly. Combining costs 8
// table lookups whatever the length; summing 64 bytes costs about as much.
// (It was 512: a record of a 256-byte body was summed twice, as the message
// and as the record. BenchmarkRecordCRC/summed/256, alternating runs on the
// shared 2-core VM: 142, 148, 144, 123 ns against 159, 160, 178 ns.)
const minCombineTail = 64

// AppendSummed adds a record like Append, whose body's last tail bytes
// have the CRC-32C tailCRC (known to the caller, e.g. a message's own
// checked CRC): the record's CRC is computed over the rest and combined
// with tailCRC (comb), not over those bytes again; short tails are summed
// directly. The record is the one Append would write when tailCRC is
// right; when it is not, the record fails its CRC check on every read.
// A body of refMinBody (2 KiB) or more is not copied: b refers to it until
// Reset, so it must not change before Write returns (vecwrite.go).
func (b *Batch) AppendSummed(kind uint8, head, body []byte, tail int, tailCRC uint32, comb *CRCCombiner) (int64, error) {
	c, off, err := b.placeIn(RecordSize(len(head)+len(body)), true)
	if err != nil {
		return 0, err
	}
	h := b.header[:] // the batch's: a local array would escape (crc32's dispatch)
	putHeaderFields(h, kind, len(head)+len(body))
	crc := crc32.Update(0, castagnoli, h[:8])
	crc = crc32.Update(crc, castagnoli, head)
	if tail < minCombineTail || tail > len(body) {
		crc = crc32.Update(crc, castagnoli, body)
	} else {
		crc = crc32.Update(crc, castagnoli, body[:len(body)-tail])
		crc = comb.Combine(crc, tailCRC, tail)
	}
	binary.BigEndian.PutUint32(h[8:], crc)
	if len(body) < refMinBody {
		b.addArena(c, h, head, body)
	} else {
		b.addArena(c, h, head)
		c.addRef(body)
	}
	return off, nil
}
