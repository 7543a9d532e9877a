package clock_test

import (
	"fmt"
	"time"

	"github.com/qmq-go/qmq/pkg/clock"
)

func ExampleFake() {
	f := clock.NewFake(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	t := f.NewTimer(365 * 24 * time.Hour)
	f.Advance(365 * 24 * time.Hour) // a year passes at once
	fmt.Println((<-t.C()).Format(time.DateOnly))
	// Output: 2031-01-01
}
