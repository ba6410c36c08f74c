/* emu_order.cpp (dplhost CUDA emulator): the stream-ordering checker. The
 * emulator runs every operation when it is queued, so work on two streams
 * never overlaps here, while on a GPU it may: this file finds the accesses a
 * GPU could run concurrently. Vector clocks: each stream counts its operations;
 * cudaEventRecord snapshots the stream's clock, cudaStreamWaitEvent joins it
 * into the waiting stream, a host synchronization (cudaStreamSynchronize,
 * cudaEventSynchronize, cudaDeviceSynchronize, cudaFree) joins it into the
 * host's clock, and work queued afterwards starts after it. Each device
 * allocation remembers its last write and the reads since (stream, clock,
 * operation); a write not ordered after an earlier read or write on another
 * stream, or a read not ordered after the last write, is reported once per
 * allocation on stderr ("cuda-emu: race: ..."). Kernel pointer arguments count
 * as writes (the emulator does not know which a kernel only reads). */
#include "emu_internal.h"
#include <map>
#include <mutex>
#include <set>
#include <stdio.h>
#include <vector>

namespace {

typedef std::vector<uint64_t> vclock;

struct access {
  int sid;
  uint64_t clk;
  const char *op;
};
struct record {
  access w = {-1, 0, nullptr};
  std::map<int, access> reads; /* the latest read of each stream since the last write */
  bool reported = false;
};

std::mutex mu;
std::map<const void *, int> ids; /* stream handle -> id (the legacy stream 0 has one too) */
std::vector<vclock> clocks;      /* by stream id */
std::vector<int> stream_devs;    /* by stream id */
vclock host;
std::map<const void *, vclock> events;
std::map<uintptr_t, record> records; /* by allocation base */
int reports;

void join(vclock &a, const vclock &b)
{
  if (a.size() < b.size()) a.resize(b.size(), 0);
  for (size_t i = 0; i < b.size(); i++)
    if (b[i] > a[i]) a[i] = b[i];
}

uint64_t at(const vclock &v, int sid) { return (size_t)sid < v.size() ? v[sid] : 0; }

int id_of(cudaStream_t s)
{
  auto it = ids.find(s);
  if (it != ids.end()) return it->second;
  int id = (int)clocks.size();
  ids[s] = id;
  clocks.emplace_back();
  stream_devs.push_back(s ? emu_stream_device(s) : -1);
  return id;
}

void name(char *buf, size_t n, int sid)
{
  if (stream_devs[sid] < 0) snprintf(buf, n, "the legacy stream");
  else snprintf(buf, n, "stream #%d of cuda:%d", sid, stream_devs[sid]);
}

void report(record &r, const access &now, const access &then, bool now_write, bool then_write, uintptr_t base)
{
  if (r.reported || reports >= 20) return;
  r.reported = true;
  reports++;
  char a[64], b[64];
  name(a, sizeof a, now.sid);
  name(b, sizeof b, then.sid);
  fprintf(stderr,
          "cuda-emu: race: %s on %s %s device memory %p that %s on %s %s, with no event or synchronization between "
          "them (a GPU may run both at once)\n",
          now.op, a, now_write ? "writes" : "reads", (void *)base, then.op, b, then_write ? "wrote" : "read");
}

} // namespace

namespace emu {

void order_op(cudaStream_t s)
{
  std::lock_guard<std::mutex> g(mu);
  int sid = id_of(s);
  vclock &v = clocks[sid];
  join(v, host); /* queued after what the host has waited for */
  if (v.size() <= (size_t)sid) v.resize(sid + 1, 0);
  v[sid]++;
}

void order_access(cudaStream_t s, uintptr_t base, bool write, const char *op)
{
  std::lock_guard<std::mutex> g(mu);
  int sid = id_of(s);
  const vclock &v = clocks[sid];
  record &r = records[base];
  access now = {sid, at(v, sid), op};
  if (r.w.sid >= 0 && r.w.sid != sid && r.w.clk > at(v, r.w.sid)) report(r, now, r.w, write, true, base);
  if (write) {
    for (auto &kv : r.reads)
      if (kv.first != sid && kv.second.clk > at(v, kv.first)) report(r, now, kv.second, true, false, base);
    r.w = now;
    r.reads.clear();
  } else {
    r.reads[sid] = now;
  }
}

void order_record(cudaEvent_t e, cudaStream_t s)
{
  std::lock_guard<std::mutex> g(mu);
  int sid = id_of(s);
  join(clocks[sid], host);
  events[e] = clocks[sid];
}

void order_wait(cudaStream_t s, cudaEvent_t e)
{
  std::lock_guard<std::mutex> g(mu);
  int sid = id_of(s);
  auto it = events.find(e);
  if (it != events.end()) join(clocks[sid], it->second);
}

void order_sync_stream(cudaStream_t s)
{
  std::lock_guard<std::mutex> g(mu);
  join(host, clocks[id_of(s)]);
}

void order_sync_event(cudaEvent_t e)
{
  std::lock_guard<std::mutex> g(mu);
  auto it = events.find(e);
  if (it != events.end()) join(host, it->second);
}

void order_sync_all()
{
  std::lock_guard<std::mutex> g(mu);
  for (const vclock &v : clocks) join(host, v);
}

void order_forget_event(cudaEvent_t e)
{
  std::lock_guard<std::mutex> g(mu);
  events.erase(e);
}

void order_forget(uintptr_t base)
{
  std::lock_guard<std::mutex> g(mu);
  records.erase(base);
}

} // namespace emu

/* the races reported so far (emu_selftest) */
extern "C" int emu_order_reports(void)
{
  std::lock_guard<std::mutex> g(mu);
  return reports;
}
