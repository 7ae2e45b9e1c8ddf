package meshtype

import (
	"errors"
	"fmt"
	"strconv"
	"time"
)

// Duration is a time.Duration written as Go duration text ("30m", "1h30m").
type Duration time.Duration

// String formats the duration as Go does.
func (d Duration) String() string { return time.Duration(d).String() }

// MarshalText writes the duration as text.
func (d Duration) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// UnmarshalText parses Go duration text; negative durations are refused.
func (d *Duration) UnmarshalText(text []byte) error {
	v, err := time.ParseDuration(string(text))
	if err != nil {
		return fmt.Errorf("invalid duration %q: want a duration such as 30s, 5m or 1h30m", text)
	}
	if v < 0 {
		return fmt.Errorf("invalid duration %q: must not be negative", text)
	}
	*d = Duration(v)
	return nil
}

// MarshalJSON writes the duration as a JSON string.
func (d Duration) MarshalJSON() ([]byte, error) { return strconv.AppendQuote(nil, d.String()), nil }

// UnmarshalJSON reads a JSON string of duration text.
func (d *Duration) UnmarshalJSON(data []byte) error {
	s, err := strconv.Unquote(string(data))
	if err != nil {
		return errors.New("invalid duration " + string(data) + ": want a string such as \"30m\"")
	}
	return d.UnmarshalText([]byte(s))
}
