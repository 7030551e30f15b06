// record/exec_template.h: what the kernel program needs to build a process's unwind context at
// its exec, before the recorder has read its mappings (bpf/abi/record_types.h
// lj_rec_exec_template): the modules of an executable that the ELF loader places relative to an
// auxiliary-vector value — the executable itself (AT_ENTRY), its program interpreter (AT_BASE)
// and the vDSO (AT_SYSINFO_EHDR) — measured on a process of that executable.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "common/result.h"
#include "record/process_context.h"

extern "C" {
#include "abi/record_types.h"
}

namespace ljprof::record {

// /proc/PID/auxv as (type, value) words, up to AT_NULL.
Result<std::vector<uint64_t>> read_auxv(uint32_t pid);

// The key the kernel finds the template by: /proc/PID/exe's inode and device, the device in the
// kernel's dev_t encoding (major << 20 | minor, include/linux/kdev_t.h).
Result<lj_rec_exec_key> exec_key(uint32_t pid);

// The template of `ctx`'s executable from its process's auxv (`auxv`: read_auxv's words). Only
// modules whose rows are in the kernel (MappedObject::uploaded) and that one of the three
// anchors places: the executable's mappings (the object whose mapping holds AT_ENTRY, at that
// mapping's bias), the interpreter's (bias AT_BASE) and the vDSO (mapped at AT_SYSINFO_EHDR).
// An error when the executable's own mapping is not among them (nothing worth a template).
Result<lj_rec_exec_template> exec_template(const ProcessContext& ctx,
                                           std::span<const uint64_t> auxv);

// The auxv value of `type`, 0 if absent.
uint64_t auxv_value(std::span<const uint64_t> auxv, uint64_t type);

}  // namespace ljprof::record
