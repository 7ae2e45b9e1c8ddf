package meshtype

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"strconv"
	"strings"
)

// ByteSize is a number of bytes, written in YAML as a plain integer or with a
// unit. Decimal units (kB, MB, GB, TB, also K, M, G, T) are powers of 1000;
// binary units (KiB, MiB, GiB, TiB, also Ki, Mi, Gi, Ti) are powers of 1024.
// So "1MB" is 1,000,000 bytes and "256Mi" is 268,435,456 bytes.
//
// docker/go-units parses either decimal or binary sizes but not both in one
// field, which the definition format needs, hence this small parser.
type ByteSize int64

var byteUnits = map[string]int64{
	"": 1, "B": 1,
	"k": 1e3, "K": 1e3, "kB": 1e3, "KB": 1e3,
	"M": 1e6, "MB": 1e6,
	"G": 1e9, "GB": 1e9,
	"T": 1e12, "TB": 1e12,
	"Ki": 1 << 10, "KiB": 1 << 10,
	"Mi": 1 << 20, "MiB": 1 << 20,
	"Gi": 1 << 30, "GiB": 1 << 30,
	"Ti": 1 << 40, "TiB": 1 << 40,
}

// ParseByteSize parses s as a ByteSize.
func ParseByteSize(s string) (ByteSize, error) {
	t := strings.TrimSpace(s)
	i := 0
	for i < len(t) && (t[i] >= '0' && t[i] <= '9' || t[i] == '.') {
		i++
	}
	num, unit := t[:i], strings.TrimSpace(t[i:])
	if num == "" {
		return 0, fmt.Errorf("invalid size %q: want a number with an optional unit such as 10MB or 256Mi", s)
	}
	mult, ok := byteUnits[unit]
	if !ok {
		return 0, fmt.Errorf("invalid size %q: unknown unit %q (use B, kB, MB, GB, TB, KiB, MiB, GiB or TiB)", s, unit)
	}
	r, ok := new(big.Rat).SetString(num)
	if !ok {
		return 0, fmt.Errorf("invalid size %q: bad number %q", s, num)
	}
	r.Mul(r, new(big.Rat).SetInt64(mult))
	if !r.IsInt() {
		return 0, fmt.Errorf("invalid size %q: not a whole number of bytes", s)
	}
	if !r.Num().IsInt64() {
		return 0, fmt.Errorf("invalid size %q: too large", s)
	}
	return ByteSize(r.Num().Int64()), nil
}

// String formats the size in the largest unit that represents it exactly.
func (b ByteSize) String() string {
	n := int64(b)
	if n == 0 {
		return "0"
	}
	for _, u := range []struct {
		name string
		size int64
	}{{"Ti", 1 << 40}, {"Gi", 1 << 30}, {"Mi", 1 << 20}, {"TB", 1e12}, {"GB", 1e9}, {"MB", 1e6}, {"Ki", 1 << 10}, {"kB", 1e3}} {
		if n%u.size == 0 {
			return strconv.FormatInt(n/u.size, 10) + u.name
		}
	}
	return strconv.FormatInt(n, 10)
}

// MarshalText writes the size with a unit.
func (b ByteSize) MarshalText() ([]byte, error) { return []byte(b.String()), nil }

// UnmarshalText parses a size with an optional unit.
func (b *ByteSize) UnmarshalText(text []byte) error {
	v, err := ParseByteSize(string(text))
	if err != nil {
		return err
	}
	*b = v
	return nil
}

// MarshalJSON writes the size as a number of bytes, the form machines want.
func (b ByteSize) MarshalJSON() ([]byte, error) { return strconv.AppendInt(nil, int64(b), 10), nil }

// UnmarshalJSON accepts a number of bytes or a string with a unit.
func (b *ByteSize) UnmarshalJSON(data []byte) error {
	s := string(data)
	if strings.HasPrefix(s, `"`) {
		u, err := strconv.Unquote(s)
		if err != nil {
			return fmt.Errorf("invalid size %s", s)
		}
		return b.UnmarshalText([]byte(u))
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || f < 0 || f != math.Trunc(f) || f > math.MaxInt64 {
		return errors.New("invalid size " + s + ": want a whole, non-negative number of bytes")
	}
	*b = ByteSize(f)
	return nil
}
