/* json.h: how the CLI writes JSON values: strings quoted and escaped, numbers that are not finite
 * as null. Every --json output (info, stats, the benches) writes its strings and measured
 * numbers through these. */
#ifndef DEVRT_CLI_JSON_H
#define DEVRT_CLI_JSON_H
#include <stddef.h>

/* s as a JSON string literal ("null" for NULL) in buf (cap bytes; cut short, still valid). */
const char* json_quote(char* buf, size_t cap, const char* s);
/* v printed with printf format fmt (a %f, %g or %e conversion) in buf (32 bytes), or null. */
const char* json_num(char* buf, const char* fmt, double v);
/* Prints s as a JSON string literal to stdout. */
void json_str(const char* s);
#endif
