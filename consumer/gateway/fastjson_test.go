package gateway

import (
	"reflect"
	"strings"
	"testing"
)

var fastDecodeSeeds = []struct {
	body string
	fast bool // the fast decoder takes it
}{
	{`{"messages":[{"subject":"a.b","body":"hello"}]}`, true},
	{" {\n\t\"messages\" : [ {\"subject\":\"a\" , \"body\":\"x\",\"id\":\"m1\",\"tags\":[\"t1\",\"t2\"],\"properties\":{\"k\":\"v\",\"k2\":\"\"},\"bodyEncoding\":\"base64\",\"delay\":\"2s\"} ] }\r\n", true},
	{`{"messages":[]}`, true},
	{`{}`, true},
	{`{"messages":[{}]}`, true},
	{`{"messages":[{"subject":"s","tags":[],"properties":{}}]}`, true},
	{`{"messages":[{"subject":"s","body":"é ✓ ` + strings.Repeat("long text ", 20) + `"}]}`, true},
	{`{"messages":[{"subject":"s","body":"` + strings.Repeat("x", 256) + `"},{"subject":"s","body":"` + strings.Repeat("y", 255) + `"}]}`, true},
	{`{"consumer":"c1","ids":["a","b"]}`, true},
	{`{"consumer":"c1","ids":["a"],"retryAfter":"1s"}`, true},
	{`{"consumer":"c1","ids":[]}`, true},
	// The decoder of record takes these, or refuses them.
	{`{"messages":[{"subject":"s","body":"quote \" inside"}]}`, false},
	{`{"messages":[{"subject":"s","body":"\u00e9"}]}`, false},
	{`{"messages":[{"Subject":"s","body":"x"}]}`, false},
	{`{"messages":[{"subject":"s","deliverAt":"2026-12-02T10:00:00Z"}]}`, false},
	{`{"messages":[{"subject":"s","body":null}]}`, false},
	{`{"messages":null}`, false},
	{`{"messages":[{"subject":"s","subject":"t"}]}`, false},
	{`{"messages":[{"subject":"s","colour":"red"}]}`, false},
	{`{"messages": [`, false},
	{`{"messages": []} {}`, false},
	{`{"messages":[{"subject":"s","body":"bad ` + "\xff" + ` utf8"}]}`, false},
	{`{"messages":[{"subject":"s","body":"tab` + "\t" + `"}]}`, false},
	{`{"messages":[{"subject":"s"},]}`, false},
	{`{"messages":[{"subject":"s",}]}`, false},
	{`{"consumer":"c1","ids":["a",]}`, false},
	{`{"consumer":"c1","ids":[1]}`, false},
	{``, false},
	{`"`, false},
	{`{"messages":[{"subject":"s","body":"unterminated}]}`, false},
}

// checkFastDecode: whatever the fast decoder takes, goccy/go-json (the
// decoder of record) takes too and decodes to the same values.
func checkFastDecode(t *testing.T, body string, wantFast *bool) {
	t.Helper()
	data := []byte(body)
	for _, pair := range []struct {
		fast interface{ decodeFast([]byte) bool }
		slow any
	}{
		{&PublishRequest{}, &PublishRequest{}},
		{&AckRequest{}, &AckRequest{}},
	} {
		took := pair.fast.decodeFast(data)
		if !took {
			if !reflect.ValueOf(pair.fast).Elem().IsZero() {
				t.Fatalf("%q: the fast decoder gave up but left %+v", body, pair.fast)
			}
			continue
		}
		if p := decodeGoJSON([]byte(body), pair.slow); p != nil {
			t.Fatalf("%q: the fast decoder took what goccy/go-json refuses: %s", body, p.Detail)
		}
		if !reflect.DeepEqual(pair.fast, pair.slow) {
			t.Fatalf("%q:\nfast  %#v\ngojson %#v", body, pair.fast, pair.slow)
		}
		if wantFast != nil && !*wantFast {
			t.Fatalf("%q: the fast decoder took it", body)
		}
		wantFast = nil
	}
	if wantFast != nil && *wantFast {
		t.Fatalf("%q: the fast decoder gave up", body)
	}
}

func TestFastDecode_MatchesGoJSON(t *testing.T) {
	for _, c := range fastDecodeSeeds {
		checkFastDecode(t, c.body, &c.fast)
	}
}

func FuzzFastDecode(f *testing.F) {
	for _, c := range fastDecodeSeeds {
		f.Add(c.body)
	}
	f.Fuzz(func(t *testing.T, body string) { checkFastDecode(t, body, nil) })
}
