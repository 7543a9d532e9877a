package metaserver

import (
	"errors"
	"testing"

	"github.com/qmq-go/qmq/pkg/exposure"
)

// A meta server registers its TCP address in etcd: bound to all
// interfaces it needs --advertise-addr, and registers that.
func TestOptions_WildcardListenerNeedsAdvertiseAddr(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:20880", "[::]:20880", ":20880"} {
		o := NewOptions()
		o.Addr, o.HTTPAddr, o.Insecure, o.EtcdEndpoints = addr, "127.0.0.1:0", true, []string{"127.0.0.1:2379"}
		if err := o.Validate(); !errors.Is(err, exposure.ErrNoAdvertiseAddr) || !errors.Is(err, ErrInvalidOptions) {
			t.Errorf("%s without --advertise-addr: %v, want ErrNoAdvertiseAddr", addr, err)
		}
		o.AdvertiseAddr = "meta1.example.com:20880"
		if err := o.Validate(); err != nil {
			t.Errorf("%s with --advertise-addr: %v", addr, err)
		}
	}
}
