package protocol

import (
	"bytes"
	"reflect"
	"testing"
	"unsafe"
)

// within reports whether b lies inside buf's array.
func within(b, buf []byte) bool {
	if len(b) == 0 {
		return true
	}
	start := uintptr(unsafe.Pointer(unsafe.SliceData(buf)))
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	return p >= start && p+uintptr(len(b)) <= start+uintptr(len(buf))
}

// A view moved to a copy of its bytes equals a view parsed from the copy,
// field for field, and points only into the copy.
func TestView_Move(t *testing.T) {
	for _, m := range []*Message{sampleMessage(), {Subject: "s", ID: "i"}} {
		raw, err := AppendMessage(nil, m, DefaultLimits)
		if err != nil {
			t.Fatal(err)
		}
		v, err := ParseMessage(raw)
		if err != nil {
			t.Fatal(err)
		}
		cp := bytes.Clone(raw)
		want, err := ParseMessage(cp)
		if err != nil {
			t.Fatal(err)
		}
		got := v
		got.Move(cp)
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("moved view %+v, parsed %+v", got, want)
		}
		for _, f := range [][]byte{got.Raw, got.Subject, got.ID, got.tags, got.props, got.Body} {
			if !within(f, cp) {
				t.Fatal("a moved view's field points outside the copy")
			}
		}
	}
}

// Move re-points a decoded send request's messages into a copy of its body.
func TestSendRequest_Move(t *testing.T) {
	msgs := encodeN(t, 4, 33)
	msgs[2] = msgs[2][:0:0] // lengths differ; an empty one too
	body := AppendSendRequest(nil, 9, [][]byte{msgs[0], msgs[1], encodeN(t, 1, 70)[0], msgs[3]})
	var req SendRequest
	if err := req.Decode(body); err != nil {
		t.Fatal(err)
	}
	cp := bytes.Clone(body)
	req.Move(cp)
	var want SendRequest
	if err := want.Decode(cp); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(req, want) {
		t.Fatal("moved request differs from the copy decoded")
	}
	for _, m := range req.Messages {
		if !within(m, cp) {
			t.Fatal("a moved message points outside the copy")
		}
	}
}
