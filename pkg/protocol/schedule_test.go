package protocol

import (
	"errors"
	"reflect"
	"testing"
)

func TestScheduleRequests_RoundTrip(t *testing.T) {
	targets := []ScheduleTarget{{Subject: "orders", Key: "k1"}, {Subject: "orders", Key: "20260101.id", ByID: true}}
	c, err := DecodeScheduleCancelRequest(AppendScheduleCancelRequest(nil, ScheduleCancelRequest{Epoch: 7, Targets: targets}))
	if err != nil || c.Epoch != 7 || !reflect.DeepEqual(c.Targets, targets) {
		t.Fatalf("cancel request: %+v, %v", c, err)
	}
	body := AppendScheduleRescheduleRequest(nil, ScheduleRescheduleRequest{Epoch: 3, Targets: targets, Dues: []int64{100, 200}})
	r, err := DecodeScheduleRescheduleRequest(body)
	if err != nil || r.Epoch != 3 || !reflect.DeepEqual(r.Targets, targets) || !reflect.DeepEqual(r.Dues, []int64{100, 200}) {
		t.Fatalf("reschedule request: %+v, %v", r, err)
	}
	for n := 0; n < len(body); n++ {
		if _, err := DecodeScheduleRescheduleRequest(body[:n]); !errors.Is(err, ErrTruncated) {
			t.Fatalf("%d of %d bytes: %v, want ErrTruncated", n, len(body), err)
		}
	}
	if _, err := DecodeScheduleCancelRequest(append(AppendScheduleCancelRequest(nil, ScheduleCancelRequest{}), 0)); !errors.Is(err, ErrTrailingBytes) {
		t.Fatalf("trailing byte: %v", err)
	}
	if err := DefaultLimits.CheckScheduleTarget(ScheduleTarget{Subject: "orders", Key: string(make([]byte, MaxScheduleKeyLen+1))}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("long key: %v", err)
	}
	if s := StatusAlreadyFired.String(); s != "already fired" {
		t.Fatalf("status name %q", s)
	}
}
