// The two glibc functions newer than 2.34 that the static GCC 12 runtime calls, defined here so
// that the portable executable runs on glibc 2.34 (RHEL 9; Ubuntu 22.04 has 2.35). Built on
// Debian 12 (glibc 2.36), libgcc_eh.a finds unwind tables with _dl_find_object (glibc 2.35;
// libgcc/unwind-dw2-fde-dispatch.c) and libstdc++.a's std::random_device reads arc4random
// (glibc 2.36; libstdc++-v3/src/c++11/random.cc). A definition in the executable binds those
// references at link time, so the dynamic symbol table asks nothing of glibc past 2.34.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/random.h>

struct ObjectSearch {
  uintptr_t pc;
  struct dl_find_object* result;
  int found;
};

static int find_object(struct dl_phdr_info* info, size_t size, void* data) {
  (void)size;
  struct ObjectSearch* search = data;
  uintptr_t start = UINTPTR_MAX, end = 0;
  int contains_pc = 0;
  const ElfW(Phdr)* eh_frame_hdr = NULL;
  for (ElfW(Half) i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)* phdr = &info->dlpi_phdr[i];
    if (phdr->p_type == PT_GNU_EH_FRAME) eh_frame_hdr = phdr;
    if (phdr->p_type != PT_LOAD) continue;
    uintptr_t seg_start = info->dlpi_addr + phdr->p_vaddr;
    uintptr_t seg_end = seg_start + phdr->p_memsz;
    if (seg_start < start) start = seg_start;
    if (seg_end > end) end = seg_end;
    if (search->pc >= seg_start && search->pc < seg_end) contains_pc = 1;
  }
  if (!contains_pc) return 0;
  // What glibc's own _dl_find_object fills in (elf/dl-find_object.c): the object's mapped range
  // and its PT_GNU_EH_FRAME; libgcc reads nothing else on x86-64 and arm64 (no eh_dbase there).
  search->result->dlfo_flags = 0;
  search->result->dlfo_map_start = (void*)start;
  search->result->dlfo_map_end = (void*)end;
  search->result->dlfo_link_map = NULL;
  search->result->dlfo_eh_frame =
      eh_frame_hdr ? (void*)(info->dlpi_addr + eh_frame_hdr->p_vaddr) : NULL;
  search->found = 1;
  return 1;
}

int _dl_find_object(void* pc, struct dl_find_object* result) {
  struct ObjectSearch search = {(uintptr_t)pc, result, 0};
  dl_iterate_phdr(find_object, &search);
  return search.found ? 0 : -1;
}

// glibc's arc4random reads getrandom and ends the process when no entropy can be had.
uint32_t arc4random(void) {
  uint32_t value;
  for (;;) {
    ssize_t n = getrandom(&value, sizeof value, 0);
    if (n == (ssize_t)sizeof value) return value;
    if (n < 0 && errno != EINTR) abort();
  }
}
