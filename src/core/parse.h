/* parse.h (internal): the one reader of unsigned numbers in settings (DEVRT_*), command lines and
 * allocation logs. */
#ifndef DEVRT_CORE_PARSE_H
#define DEVRT_CORE_PARSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The n characters at s as a number in base 10 or 16: digits of the base only, at least one (no
 * sign, blank, 0x prefix or suffix), at most UINT64_MAX; a decimal number has no leading zero
 * ("010" is refused, neither 8 nor 10). False, *out untouched, for anything else. */
static inline bool dv_parse_u64(const char* s, size_t n, unsigned base, uint64_t* out) {
  uint64_t v = 0;
  if (!n || (base == 10 && s[0] == '0' && n > 1)) return false;
  for (size_t i = 0; i < n; i++) {
    unsigned c = (unsigned char)s[i], low = c | 0x20; /* 'A'..'F' as 'a'..'f' */
    unsigned d = c >= '0' && c <= '9' ? c - '0' : low >= 'a' && low <= 'f' ? low - 'a' + 10 : base;
    if (d >= base || v > (UINT64_MAX - d) / base) return false;
    v = v * base + d;
  }
  *out = v;
  return true;
}

#endif
