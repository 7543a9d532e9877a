package exposure

import (
	"errors"
	"strings"
	"testing"
)

func TestIsLoopback(t *testing.T) {
	for _, tc := range []struct {
		addr string
		want bool
	}{
		{"127.0.0.1:20881", true},
		{"127.8.9.10:1", true},
		{"[::1]:20881", true},
		{"localhost:8080", true},
		{"LocalHost:8080", true},
		{"127.0.0.1", true},
		{":20881", false},
		{"0.0.0.0:20881", false},
		{"[::]:20881", false},
		{"10.0.0.5:20881", false},
		{"broker.example.com:20881", false},
		{"localhost.example.com:1", false},
		{"[fe80::1%eth0]:1", false},
		{"", false},
	} {
		if got := IsLoopback(tc.addr); got != tc.want {
			t.Errorf("IsLoopback(%q) = %v, want %v", tc.addr, got, tc.want)
		}
	}
}

func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		name                     string
		addr                     string
		tlsOn, authOn, insecure  bool
		wantErr                  bool
		wantMissing, wantPresent []string
	}{
		{name: "loopback plaintext", addr: "127.0.0.1:1"},
		{name: "public with both", addr: "0.0.0.0:1", tlsOn: true, authOn: true},
		{name: "public insecure", addr: "0.0.0.0:1", insecure: true},
		{name: "public plaintext", addr: "0.0.0.0:1", wantErr: true, wantMissing: []string{"0.0.0.0:1", "TLS", "required authentication"}},
		{name: "public TLS only", addr: ":1", tlsOn: true, wantErr: true,
			wantMissing: []string{"required authentication"}, wantPresent: []string{"no TLS"}},
		{name: "public auth only", addr: "10.1.2.3:1", authOn: true, wantErr: true,
			wantMissing: []string{"no TLS"}, wantPresent: []string{"authentication"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Check(tc.addr, tc.tlsOn, tc.authOn, tc.insecure)
			if (err != nil) != tc.wantErr {
				t.Fatalf("Check = %v, want error %v", err, tc.wantErr)
			}
			if err == nil {
				return
			}
			if !errors.Is(err, ErrInsecureListener) {
				t.Fatalf("%v does not wrap ErrInsecureListener", err)
			}
			for _, s := range tc.wantMissing {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("%q does not name %q", err, s)
				}
			}
			for _, s := range tc.wantPresent {
				if strings.Contains(err.Error(), s) {
					t.Errorf("%q names %q, which is configured", err, s)
				}
			}
		})
	}
}
