package segment

import (
	"encoding/binary"
	"hash/crc32"
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
// CRCCombiner keeps that map for recent lengths as 32 columns (the image of
// each bit), so combining costs 32 masked XORs.

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
	n    int // len(B) + 1; 0: empty
	cols [32]uint32
}

// Combine returns crc(A ‖ B) from c1 = crc(A), c2 = crc(B) and n = len(B).
func (c *CRCCombiner) Combine(c1, c2 uint32, n int) uint32 {
	s := &c.slots[uint(n)%combinerSlots]
	if s.n != n+1 {
		// The map's columns: the image of bit i (x^(31-i)) is
		// x^(8n)·x^(31-i); start from x^(8n)·x⁰ (bit 31) and multiply
		// by x for each lower bit.
		col := xPow8(n)
		for i := 31; i >= 0; i-- {
			s.cols[i] = col
			col = col>>1 ^ castagnoliReflected&-(col&1)
		}
		s.n = n + 1
	}
	var p uint32
	for i := 0; i < 32; i++ {
		p ^= s.cols[i] & -(c1 >> i & 1)
	}
	return p ^ c2
}

// minCombineTail: below this a tail is summed directly (as fast as combining).
const minCombineTail = 512

// AppendSummed adds a record like Append, whose body's last tail bytes
// have the CRC-32C tailCRC (known to the caller, e.g. a message's own
// checked CRC): the record's CRC is computed over the rest and combined
// with tailCRC (comb), not over those bytes again. The record is the one
// Append would write when tailCRC is right; when it is not, the record
// fails its CRC check on every read. Short tails are summed directly.
func (b *Batch) AppendSummed(kind uint8, head, body []byte, tail int, tailCRC uint32, comb *CRCCombiner) (int64, error) {
	if tail < minCombineTail || tail > len(body) {
		return b.Append(kind, head, body)
	}
	c, off, err := b.place(RecordSize(len(head) + len(body)))
	if err != nil {
		return 0, err
	}
	start := len(c.data)
	c.data = append(c.data, make([]byte, HeaderSize)...)
	c.data = append(c.data, head...)
	c.data = append(c.data, body...)
	h := c.data[start:]
	putHeaderFields(h, kind, len(head)+len(body))
	crc := crc32.Update(0, castagnoli, h[:8])
	crc = crc32.Update(crc, castagnoli, head)
	crc = crc32.Update(crc, castagnoli, body[:len(body)-tail])
	binary.BigEndian.PutUint32(h[8:], comb.Combine(crc, tailCRC, tail))
	return off, nil
}
