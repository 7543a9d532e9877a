package exposure

import (
	"errors"
	"testing"
)

func TestIsWildcard(t *testing.T) {
	for addr, want := range map[string]bool{
		"0.0.0.0:20881": true, "[::]:20881": true, ":20881": true, "0.0.0.0": true, "": true,
		"127.0.0.1:20881": false, "10.0.0.5:1": false, "[::1]:1": false, "broker.example.com:20881": false,
	} {
		if got := IsWildcard(addr); got != want {
			t.Errorf("IsWildcard(%q) = %v, want %v", addr, got, want)
		}
	}
}

func TestCheckAdvertise(t *testing.T) {
	for _, c := range []struct {
		listen, advertise string
		ok                bool
	}{
		{"127.0.0.1:20881", "", true},
		{"10.0.0.5:20881", "", true},
		{"127.0.0.1:0", "", true},
		{"0.0.0.0:20881", "", false},
		{"[::]:20881", "", false},
		{":20881", "", false},
		{"0.0.0.0:20881", "10.0.0.5:20881", true},
		{"[::]:20881", "broker1.example.com:20881", true},
		{"0.0.0.0:20881", "0.0.0.0:20881", false},
		{"0.0.0.0:20881", "10.0.0.5", false},
		{"0.0.0.0:20881", "10.0.0.5:0", false},
	} {
		err := CheckAdvertise(c.listen, c.advertise, "--advertise-addr")
		if c.ok && err != nil {
			t.Errorf("CheckAdvertise(%q, %q) = %v", c.listen, c.advertise, err)
		}
		if !c.ok && !errors.Is(err, ErrNoAdvertiseAddr) {
			t.Errorf("CheckAdvertise(%q, %q) = %v, want ErrNoAdvertiseAddr", c.listen, c.advertise, err)
		}
	}
}

func TestReachable(t *testing.T) {
	for _, c := range []struct{ bound, advertise, want string }{
		{"127.0.0.1:8080", "10.0.0.5:20880", "127.0.0.1:8080"},
		{"0.0.0.0:8080", "10.0.0.5:20880", "10.0.0.5:8080"},
		{"[::]:8080", "meta1.example.com:20880", "meta1.example.com:8080"},
		{"0.0.0.0:8080", "", "0.0.0.0:8080"},
	} {
		if got := Reachable(c.bound, c.advertise); got != c.want {
			t.Errorf("Reachable(%q, %q) = %q, want %q", c.bound, c.advertise, got, c.want)
		}
	}
}
