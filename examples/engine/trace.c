/* trace.c: `devrt demo --trace FILE`: the run as Chrome trace-event JSON (Perfetto,
 * chrome://tracing). A process per tenant (its partition), a track per stream: each launch with
 * its device start and end, the semaphore value it signals, an arrow for each cross-stream wait,
 * allocations, frees and OVER_BUDGET retries; counters of each tenant's live bytes (the logging
 * layer) and of the device's live, pending and cached bytes. Times in us from the run's start.
 * A long GPU run is cut where some tenant passes MAX_LAUNCHES launches, so the file stays small
 * enough to load (otherData says where); launches are drawn where they have device stamps, so a
 * thinned stream (engine.h: stamp_stride) shows 1 launch in N (otherData counts such streams). */
#include <errno.h>
#include <inttypes.h>
#include <string.h>
#include "engine.h"
#include "json.h"

enum { DEVICE_PID = 100, MAX_LAUNCHES = 50000 };

static double us(const eg_engine* e, uint64_t t) {
  return t > e->t0 ? (double)(t - e->t0) / 1e3 : 0;
}

static void meta(FILE* f, bool* first, int pid, int tid, const char* what, const char* name) {
  char q[256];
  fprintf(f, "%s\n{\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"name\":\"%s\",\"args\":{\"name\":%s}}",
          *first ? "" : ",", pid, tid, what, json_quote(q, sizeof q, name));
  *first = false;
}

int eg_write_trace(eg_engine* e, const char* path) {
  FILE* f = fopen(path, "w");
  if (!f) return eg_fail(e, "--trace: cannot write %s: %s", path, strerror(errno));
  static const char* const sems[EG_STREAMS] = {"gen0", "gen1", "scan", "check"};
  bool first = true;
  uint64_t flow = 0, cut = UINT64_MAX; /* events from cut (host ns) on are left out */
  for (int i = 0; i < e->nt; i++)
    if (e->t[i].nrecs > MAX_LAUNCHES && e->t[i].recs[MAX_LAUNCHES].t_submit < cut)
      cut = e->t[i].recs[MAX_LAUNCHES].t_submit;
  fprintf(f,
          "{\"displayTimeUnit\":\"ns\",\"otherData\":{\"backend\":\"%s\",\"cut_at_us\":%.3f,"
          "\"thinned_streams\":%d},\"traceEvents\":[",
          e->f->backend, cut == UINT64_MAX ? -1.0 : us(e, cut), e->f->thinned);
  meta(f, &first, DEVICE_PID, 0, "process_name",
       e->nd > 1 ? "device 0 memory (global budget)" : "device memory (global budget)");
  for (int i = 0; i < e->nt; i++) {
    const eg_tenant* t = &e->t[i];
    char name[160], dev[24] = "";
    if (e->nd > 1) snprintf(dev, sizeof dev, "device %d, ", t->d->index);
    snprintf(name, sizeof name, "tenant %d (%s): %spartition %u, %u SMs%s", i,
             t->interactive ? "interactive" : "batch", dev, t->index, t->pinfo.sm_count,
             t->pinfo.isolated ? "" : ", plain streams");
    meta(f, &first, i + 1, 0, "process_name", name);
    fprintf(f,
            ",\n{\"ph\":\"M\",\"pid\":%d,\"name\":\"process_sort_index\",\"args\":"
            "{\"sort_index\":%d}}",
            i + 1, i + 1);
    for (int s = 0; s < EG_STREAMS; s++)
      meta(f, &first, i + 1, s + 1, "thread_name", eg_stream_names[s]);
    for (size_t r = 0; r < t->nrecs; r++) {
      const eg_launch_rec* x = &t->recs[r];
      if (!x->end || x->t_submit >= cut) continue;
      fprintf(f,
              ",\n{\"ph\":\"X\",\"cat\":\"launch\",\"name\":\"%s\",\"pid\":%d,\"tid\":%d,"
              "\"ts\":%.3f,\"dur\":%.3f,\"args\":{\"query\":%" PRIu32 ",\"chunk\":%" PRIu32
              ",\"signals\":\"%s=%" PRIu64 "\",\"submitted_us\":%.3f}}",
              eg_stage_names[x->stage], i + 1, x->stream + 1, us(e, x->start),
              (double)(x->end - x->start) / 1e3, x->query, x->chunk, sems[x->stream], x->sem_value,
              us(e, x->t_submit));
      fprintf(f,
              ",\n{\"ph\":\"i\",\"s\":\"t\",\"cat\":\"semaphore\",\"name\":\"signal %s=%" PRIu64
              "\",\"pid\":%d,\"tid\":%d,\"ts\":%.3f}",
              sems[x->stream], x->sem_value, i + 1, x->stream + 1, us(e, x->end));
      if (x->wait < t->nrecs && t->recs[x->wait].end) { /* the generate it waited for */
        const eg_launch_rec* w = &t->recs[x->wait];
        flow++;
        fprintf(f,
                ",\n{\"ph\":\"s\",\"cat\":\"wait\",\"name\":\"waits for\",\"id\":%" PRIu64
                ",\"pid\":%d,\"tid\":%d,\"ts\":%.3f}",
                flow, i + 1, w->stream + 1, us(e, w->end) - 0.001);
        fprintf(
            f,
            ",\n{\"ph\":\"f\",\"bp\":\"e\",\"cat\":\"wait\",\"name\":\"waits for\",\"id\":%" PRIu64
            ",\"pid\":%d,\"tid\":%d,\"ts\":%.3f}",
            flow, i + 1, x->stream + 1, us(e, x->start));
      }
    }
    static const char* const kinds[3] = {"alloc", "free", "OVER_BUDGET: retry"};
    for (size_t r = 0; r < t->nmrecs; r++) {
      const eg_mem_rec* m = &t->mrecs[r];
      if (m->t >= cut) break;
      fprintf(f,
              ",\n{\"ph\":\"i\",\"s\":\"t\",\"cat\":\"memory\",\"name\":\"%s %" PRIu64
              " B\",\"pid\":%d,\"tid\":%d,\"ts\":%.3f}",
              kinds[m->kind], m->bytes, i + 1, m->stream + 1, us(e, m->t));
    }
  }
  for (size_t k = 0; k < e->nlive && e->live[k].t < cut; k++)
    fprintf(f,
            ",\n{\"ph\":\"C\",\"name\":\"live "
            "bytes\",\"pid\":%d,\"ts\":%.3f,\"args\":{\"live\":%" PRIu64 "}}",
            e->live[k].tenant + 1, us(e, e->live[k].t), e->live[k].live);
  for (size_t k = 0; k < e->ndev && e->dev[k].t < cut; k++)
    fprintf(f,
            ",\n{\"ph\":\"C\",\"name\":\"device bytes\",\"pid\":%d,\"ts\":%.3f,\"args\":"
            "{\"live\":%" PRIu64 ",\"pending\":%" PRIu64 ",\"cached\":%" PRIu64 "}}",
            DEVICE_PID, us(e, e->dev[k].t), e->dev[k].live, e->dev[k].pending, e->dev[k].cached);
  fprintf(f, "\n]}\n");
  if (fclose(f) != 0) return eg_fail(e, "--trace: writing %s failed: %s", path, strerror(errno));
  return 0;
}
