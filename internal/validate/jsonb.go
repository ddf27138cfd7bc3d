package validate

import (
	"bytes"
	"encoding/json"
	"fmt"
	"unicode/utf8"
)

// Limits of PostgreSQL's numeric type, which jsonb stores every number
// in: a number is refused ("value overflows numeric format", SQLSTATE
// 22003) when its first significant digit lies beyond 10^131071, when it
// shows more than 16383 digits after the decimal point once its exponent
// is applied, or when its exponent is beyond about ±2^30 (even for zero).
const (
	// NumericMaxWeight is the largest power of ten a jsonb number's first
	// significant digit may stand for.
	NumericMaxWeight = 131071
	// NumericMaxScale is the most digits a jsonb number may show after the
	// decimal point.
	NumericMaxScale = 16383
	// numericMaxExponent is the exponent's bound: PostgreSQL refuses an
	// exponent of INT_MAX/2 or more in either direction.
	numericMaxExponent = 1<<30 - 1
)

// JSONB checks that b is one JSON value that PostgreSQL's jsonb stores:
// valid UTF-8, valid JSON, no \u0000 escape, no unpaired UTF-16 surrogate
// escape, and every number within the range of numeric (see
// NumericMaxWeight and NumericMaxScale). The error says what is wrong, and
// where for a number.
func JSONB(b []byte) error {
	if !utf8.Valid(b) {
		return fmt.Errorf("not valid UTF-8")
	}
	if !json.Valid(b) {
		return fmt.Errorf("not valid JSON")
	}
	// In valid JSON, outside strings, a number starts at '-' or a digit;
	// inside, a backslash starts an escape.
	for i := 0; i < len(b); i++ {
		switch c := b[i]; {
		case c == '"':
			end, err := scanString(b, i+1)
			if err != nil {
				return err
			}
			i = end
		case c == '-' || c >= '0' && c <= '9':
			end := i + 1
			for end < len(b) && bytes.IndexByte([]byte("0123456789.eE+-"), b[end]) >= 0 {
				end++
			}
			if err := numeric(b[i:end]); err != nil {
				return fmt.Errorf("number at byte %d %w", i, err)
			}
			i = end - 1
		}
	}
	return nil
}

// scanString checks the escapes of the string starting at b[i] (after its
// opening quote) and returns the index of its closing quote.
func scanString(b []byte, i int) (int, error) {
	pendingHigh := false
	for ; i < len(b); i++ {
		switch b[i] {
		case '"':
			if pendingHigh {
				return 0, fmt.Errorf("unpaired UTF-16 surrogate escape")
			}
			return i, nil
		case '\\':
			i++ // valid JSON: a character follows
			if b[i] != 'u' {
				if pendingHigh {
					return 0, fmt.Errorf("unpaired UTF-16 surrogate escape")
				}
				continue
			}
			var r rune
			for _, c := range b[i+1 : i+5] {
				r = r<<4 | rune(hexValue(c))
			}
			i += 4
			switch {
			case r == 0:
				return 0, fmt.Errorf(`holds \u0000, which jsonb cannot store`)
			case r >= 0xD800 && r <= 0xDBFF:
				if pendingHigh {
					return 0, fmt.Errorf("unpaired UTF-16 surrogate escape")
				}
				pendingHigh = true
			case r >= 0xDC00 && r <= 0xDFFF:
				if !pendingHigh {
					return 0, fmt.Errorf("unpaired UTF-16 surrogate escape")
				}
				pendingHigh = false
			case pendingHigh:
				return 0, fmt.Errorf("unpaired UTF-16 surrogate escape")
			}
		default:
			if pendingHigh {
				return 0, fmt.Errorf("unpaired UTF-16 surrogate escape")
			}
		}
	}
	return i, nil
}

// numeric checks one JSON number token against numeric's range.
func numeric(tok []byte) error {
	mant, exp := tok, []byte(nil)
	if k := bytes.IndexAny(tok, "eE"); k >= 0 {
		mant, exp = tok[:k], tok[k+1:]
	}
	mant = bytes.TrimPrefix(mant, []byte("-"))
	intPart, frac, _ := bytes.Cut(mant, []byte("."))
	// The exponent, saturated well past every bound.
	e := int64(0)
	neg := false
	if len(exp) > 0 {
		switch exp[0] {
		case '-':
			neg, exp = true, exp[1:]
		case '+':
			exp = exp[1:]
		}
		for _, c := range exp {
			if e = e*10 + int64(c-'0'); e > 1<<40 {
				e = 1 << 40
			}
		}
		if neg {
			e = -e
		}
	}
	if e >= numericMaxExponent || e <= -numericMaxExponent {
		return fmt.Errorf("has an exponent beyond what jsonb (numeric) can store")
	}
	if scale := int64(len(frac)) - e; scale > NumericMaxScale {
		return fmt.Errorf("has %d digits after the decimal point, over the %d jsonb (numeric) can store", scale, NumericMaxScale)
	}
	// The power of ten of the first significant digit.
	digits := append(append([]byte(nil), intPart...), frac...)
	first := bytes.IndexFunc(digits, func(r rune) bool { return r != '0' })
	if first < 0 {
		return nil // zero
	}
	weight := int64(len(intPart)-1-first) + e
	if weight > NumericMaxWeight {
		return fmt.Errorf("is over 10^%d, beyond what jsonb (numeric) can store", NumericMaxWeight+1)
	}
	return nil
}

func hexValue(c byte) byte {
	switch {
	case c >= '0' && c <= '9':
		return c - '0'
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10
	default:
		return c - 'A' + 10
	}
}
