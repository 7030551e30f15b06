#include "heap/heap_core_setup.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "luajit/proc_info.h"
#include "support/test_support.h"
#include "walker/workload_core.h"

namespace ljprof::test {

void open_heap_core(const std::string& workload, HeapCoreSetup& out) {
  const Dump d = dump_core({"luajit", "/usr/bin/luajit", false}, workload);
  const CommandResult r = run({ljprof_bin(), "heap", d.core, "--json", "--top", "1"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  out.g = hex(nlohmann::json::parse(r.out)["global_state"]);
  auto core = core::CoreFile::open(d.core);
  ASSERT_TRUE(core.ok()) << core.message();
  out.core.emplace(std::move(*core));
  auto walker = core::CoreWalker::create(*out.core);
  ASSERT_TRUE(walker.ok()) << walker.message();
  out.walker = std::move(*walker);
  ASSERT_TRUE(out.walker->luajit().has_value()) << out.walker->luajit_error();
  auto info = luajit::to_walker_info(*out.walker->luajit());
  ASSERT_TRUE(info.ok()) << info.message();
  out.info = *info;
  auto census = heap::take_census(heap::Memory(out.core->mem_reader(), out.info), out.g);
  ASSERT_TRUE(census.ok()) << census.message();
  ASSERT_TRUE(census->malformed.empty()) << census->malformed.begin()->first;
  out.census = std::move(*census);
}

int PatchedMemory::read(void* ctx, uint64_t addr, void* out, uint32_t len) {
  auto* p = static_cast<PatchedMemory*>(ctx);
  const int rc = p->inner.read_mem(p->inner.ctx, addr, out, len);
  if (rc != 0 || !p->on) return rc;
  auto* bytes = static_cast<uint8_t*>(out);
  for (const Patch& patch : p->patches) {
    for (uint32_t i = 0; i < patch.len; ++i) {
      const uint64_t a = patch.addr + i;
      if (a >= addr && a - addr < len)
        bytes[a - addr] = static_cast<uint8_t>(patch.value >> (8 * i));
    }
  }
  return 0;
}

}  // namespace ljprof::test
