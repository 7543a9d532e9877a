package protocol

import "encoding/binary"

// reader walks a byte slice, remembering the first error; every method
// returns a zero value once an error is set, so decoders check r.err once.
type reader struct {
	b   []byte
	off int
	err error
}

func (r *reader) need(n int) bool {
	if r.err != nil {
		return false
	}
	if n < 0 || len(r.b)-r.off < n {
		r.err = ErrTruncated
		return false
	}
	return true
}

func (r *reader) u8() uint8 {
	if !r.need(1) {
		return 0
	}
	v := r.b[r.off]
	r.off++
	return v
}

func (r *reader) u16() uint16 {
	if !r.need(2) {
		return 0
	}
	v := binary.BigEndian.Uint16(r.b[r.off:])
	r.off += 2
	return v
}

func (r *reader) u32() uint32 {
	if !r.need(4) {
		return 0
	}
	v := binary.BigEndian.Uint32(r.b[r.off:])
	r.off += 4
	return v
}

func (r *reader) u64() uint64 {
	if !r.need(8) {
		return 0
	}
	v := binary.BigEndian.Uint64(r.b[r.off:])
	r.off += 8
	return v
}

func (r *reader) bytes(n int) []byte {
	if !r.need(n) {
		return nil
	}
	v := r.b[r.off : r.off+n : r.off+n]
	r.off += n
	return v
}

func (r *reader) bytes8() []byte  { return r.bytes(int(r.u8())) }
func (r *reader) bytes16() []byte { return r.bytes(int(r.u16())) }
func (r *reader) bytes32() []byte {
	n := r.u32()
	if uint64(n) > uint64(len(r.b)) {
		if r.err == nil {
			r.err = ErrTruncated
		}
		return nil
	}
	return r.bytes(int(n))
}

func (r *reader) string8() string { return string(r.bytes8()) }

// done sets ErrTrailingBytes when bytes are left over and returns r.err.
func (r *reader) done() error {
	if r.err == nil && r.off != len(r.b) {
		r.err = ErrTrailingBytes
	}
	return r.err
}

func appendString8(dst []byte, s string) []byte {
	dst = append(dst, uint8(len(s)))
	return append(dst, s...)
}
