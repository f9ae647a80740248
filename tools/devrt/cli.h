/* cli.h: the devrt CLI's commands and their shared options. */
#ifndef DEVRT_CLI_H
#define DEVRT_CLI_H
#include <stdbool.h>
#include <stdlib.h>
typedef struct cli_opts {
  int ordinal;
  int json;
  int rounds;
  int max; /* bench scale --max: the largest state size (0: the suite's own) */
} cli_opts;
int cli_info(const cli_opts* o);
int cli_stats(const cli_opts* o);
int bench_device(const cli_opts* o);
int bench_alloc(const cli_opts* o);
int bench_launch(const cli_opts* o);
int bench_sem(const cli_opts* o);
int bench_partition(const cli_opts* o);
int bench_scale(const cli_opts* o);
int bench_multi(const cli_opts* o);
int bench_graph(const cli_opts* o);
/* examples/engine/cli.c: `devrt demo` and `devrt bench demo`; each parses its own options
 * (argv[0] is the command's name). */
int cli_demo(int argc, char** argv);
int bench_demo(int argc, char** argv);
int cli_replay(int argc, char** argv); /* argv[0] is "replay"; parses its own options */
/* A command-line number (decimal digits only: src/core/parse.h) in [lo, hi] (lo >= 0) into *out;
 * false, after printing "WHAT \"v\" is not ...", for anything else. */
bool cli_number(const char* what, const char* v, int lo, int hi, int* out);
#endif
