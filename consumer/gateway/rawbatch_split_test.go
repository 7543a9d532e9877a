package gateway

import (
	"bytes"
	"testing"
)

// splitBinary takes exactly what AppendBinaryBatch writes: any input either
// fails or splits into bodies that encode back to it, each a slice of the
// input that cannot grow into the next.
func FuzzSplitBinary(f *testing.F) {
	f.Add(AppendBinaryBatch(nil, []byte("a"), nil, []byte("b\nc")))
	f.Add([]byte{0, 0, 0, 1, 0, 0, 0, 2, 'x'})
	f.Add([]byte{0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 'x'})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, data []byte) {
		bodies, n, err := splitBinary(data, 1000, nil)
		if err != nil || n > 1000 {
			if len(bodies) > 0 && n > 1000 {
				t.Fatalf("over the limit (%d) with %d bodies", n, len(bodies))
			}
			return
		}
		if n != len(bodies) || !bytes.Equal(AppendBinaryBatch(nil, bodies...), data) {
			t.Fatalf("%x split into %q (n %d), which encodes otherwise", data, bodies, n)
		}
		for _, b := range bodies {
			if cap(b) != len(b) {
				t.Fatalf("body %q has room to grow over the next (cap %d)", b, cap(b))
			}
		}
	})
}

// splitLines gives the lines of its input, none empty, or fails: joined
// with newlines they are the input (less one newline at its end).
func FuzzSplitLines(f *testing.F) {
	for _, s := range []string{"a\nb\n", "a", "\n", "", "a\n\nb", "a\r\nb", "\n\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		bodies, n, err := splitLines(data, 1000, nil)
		if err != nil || n > 1000 {
			return
		}
		want := bytes.TrimSuffix(data, []byte("\n"))
		if n != len(bodies) || !bytes.Equal(bytes.Join(bodies, []byte("\n")), want) {
			t.Fatalf("%q split into %q (n %d)", data, bodies, n)
		}
		for _, b := range bodies {
			if len(b) == 0 || bytes.IndexByte(b, '\n') >= 0 || cap(b) != len(b) {
				t.Fatalf("%q split into %q: an empty line, a newline or room to grow", data, bodies)
			}
		}
	})
}

// A publish's subjects and ids must not alias the request buffer, which
// the next request reuses (route caches key on subjects).
func TestDetachStrings(t *testing.T) {
	body := []byte(`{"messages":[{"subject":"s.one","id":"m1","body":"a"},{"subject":"s.one","body":"b"},{"subject":"s.two","body":"c"}]}`)
	var req PublishRequest
	if !req.decodeFast(body) {
		t.Fatal("the fast decoder refused a plain body")
	}
	detachStrings(req.Messages)
	for i := range body {
		body[i] = 'x'
	}
	m := req.Messages
	if m[0].Subject != "s.one" || m[0].ID != "m1" || m[1].Subject != "s.one" || m[2].Subject != "s.two" {
		t.Fatalf("after the buffer was reused: %+v", m)
	}
}
