// Package clock is an injectable source of time. Code that schedules work
// takes a Clock instead of calling time.Now and time.NewTimer, so that tests
// can drive it with a Fake: jump forward by years, jump back, and fire timers
// without sleeping.
//
// Real is the machine's clock. Its timers run on the monotonic clock (as
// time.Timer does), while Now reads the wall clock: code that must never act
// early compares the wall clock at fire time and re-arms its timer when it
// woke too soon, and wakes at least every so often to notice forward jumps.
//
// Fake is a manual clock for tests. Its timers have absolute deadlines on the
// fake wall clock: Advance and Set move the clock and fire (in deadline order)
// every timer whose deadline is then reached; a jump back fires nothing.
// Timers reports how many timers are armed, so a test can wait until the code
// under test is parked on its timer before moving the clock.
package clock
