package timewheel_test

import (
	"fmt"
	"time"

	"github.com/qmq-go/qmq/pkg/timewheel"
)

func Example() {
	now := int64(1_000_000) // Unix milliseconds
	w, err := timewheel.New[string](500*time.Millisecond, 1024, now)
	if err != nil {
		panic(err)
	}
	w.Add(now+1234, "b")
	w.Add(now+200, "a")
	w.Add(now-5000, "late") // already due: fires at the next Expire

	next, _ := w.NextDue()
	fmt.Println("next due in", next-now, "ms")
	for _, t := range []int64{now, now + 1233, now + 1234} {
		w.Expire(t, 0, func(due int64, v string) { fmt.Println(t-now, "ms:", v) })
	}
	// Output:
	// next due in -5000 ms
	// 0 ms: late
	// 1233 ms: a
	// 1234 ms: b
}
