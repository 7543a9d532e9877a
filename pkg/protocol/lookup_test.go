package protocol

import (
	"reflect"
	"testing"
)

func TestFindMessagesRoundTrip(t *testing.T) {
	for _, q := range []FindMessagesRequest{{By: FindByKey, Value: "order-42"}, {By: FindByID, Value: "m-1", Subject: "orders"}} {
		got, err := DecodeFindMessagesRequest(AppendFindMessagesRequest(nil, &q))
		if err != nil || got != q {
			t.Fatalf("request: %+v, %v", got, err)
		}
	}
	r := FindMessagesResponse{Messages: []FoundMessage{
		{Offset: 1, Seq: 2, Stored: 3, Flags: FoundBodyHidden, Message: []byte("m1"),
			Deliveries: []GroupDelivery{{Group: "g", State: DeliveryUnacked, Consumer: "c", PullSeq: 7, LastSeen: 9}, {Group: "h", State: DeliveryDone}}},
		{Offset: 4, Seq: 5, Stored: 6, Message: []byte("m2")},
	}}
	back, err := DecodeFindMessagesResponse(AppendFindMessagesResponse(nil, &r))
	if err != nil || !reflect.DeepEqual(back, r) {
		t.Fatalf("response: %+v, %v", back, err)
	}
	for _, bad := range []FindMessagesRequest{{By: 9, Value: "x"}, {By: FindByID}} {
		if _, err := DecodeFindMessagesRequest(AppendFindMessagesRequest(nil, &bad)); err == nil {
			t.Fatalf("%+v decoded", bad)
		}
	}
}

func FuzzDecodeFindMessagesRequest(f *testing.F) {
	f.Add(AppendFindMessagesRequest(nil, &FindMessagesRequest{By: FindByID, Value: "id"}))
	f.Add(AppendFindMessagesRequest(nil, &FindMessagesRequest{By: FindByKey, Value: "k", Subject: "s"}))
	f.Fuzz(func(t *testing.T, b []byte) {
		q, err := DecodeFindMessagesRequest(b)
		if err != nil {
			return
		}
		if back, err := DecodeFindMessagesRequest(AppendFindMessagesRequest(nil, &q)); err != nil || back != q {
			t.Fatalf("round trip of %+v: %+v, %v", q, back, err)
		}
	})
}

func FuzzDecodeFindMessagesResponse(f *testing.F) {
	f.Add(AppendFindMessagesResponse(nil, &FindMessagesResponse{Messages: []FoundMessage{{Offset: 1, Message: []byte("m"),
		Deliveries: []GroupDelivery{{Group: "g", State: DeliveryDone}}}}}))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := DecodeFindMessagesResponse(b)
		if err != nil {
			return
		}
		if back, err := DecodeFindMessagesResponse(AppendFindMessagesResponse(nil, &r)); err != nil || !reflect.DeepEqual(back, r) {
			t.Fatalf("round trip: %v", err)
		}
	})
}
