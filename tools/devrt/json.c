/* json.c: JSON string literals and numbers for the CLI's --json outputs. */
#include "json.h"
#include <math.h>
#include <stdio.h>

const char* json_quote(char* buf, size_t cap, const char* s) {
  size_t n = 0;
  if (cap < 8) return cap ? (buf[0] = 0, buf) : buf;
  if (!s) return snprintf(buf, cap, "null"), buf;
  buf[n++] = '"';
  for (; *s && n + 8 < cap; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\')
      buf[n++] = '\\', buf[n++] = (char)c;
    else if (c == '\n')
      buf[n++] = '\\', buf[n++] = 'n';
    else if (c == '\t')
      buf[n++] = '\\', buf[n++] = 't';
    else if (c < 0x20)
      n += (size_t)snprintf(buf + n, cap - n, "\\u%04x", c);
    else
      buf[n++] = (char)c;
  }
  buf[n++] = '"';
  buf[n] = 0;
  return buf;
}

const char* json_num(char* buf, const char* fmt, double v) {
  if (!isfinite(v)) return "null";
  snprintf(buf, 32, fmt, v);
  return buf;
}

void json_str(const char* s) {
  char buf[2048];
  fputs(json_quote(buf, sizeof buf, s), stdout);
}
