// libFuzzer target for the CFI parser and table builder, with the LuaJIT overlays luajit/
// computes for it. The input's first byte picks the architecture; the rest becomes the .eh_frame
// section of a small ELF built around it (with a .symtab naming `coro_startup`), so every
// mutation lands in CFI structure rather than in ELF headers. Any input must give an error or a
// table whose rows are sorted and addressable, and whose cache bytes read back to it; the same
// input read as cache bytes must be refused or give a table.
#include <elf.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "cfi/cfi.h"
#include "elf/elf_file.h"
#include "luajit/vm_cfi.h"

namespace {

constexpr uint64_t kBase = 0x400000;

template <typename T>
void put(std::vector<uint8_t>& out, size_t at, const T& v) {
  std::memcpy(out.data() + at, &v, sizeof v);
}

std::vector<uint8_t> wrap(bool aarch64, const uint8_t* cfi, size_t n) {
  const char strtab[] = "\0coro_startup";
  const char shstrtab[] = "\0.text\0.eh_frame\0.symtab\0.strtab\0.shstrtab";
  const size_t text_off = 128, text_size = 64;
  const size_t eh_off = text_off + text_size;
  const size_t sym_off = (eh_off + n + 7) & ~size_t{7};
  const size_t str_off = sym_off + 2 * sizeof(Elf64_Sym);
  const size_t shstr_off = str_off + sizeof strtab;
  const size_t sh_off = (shstr_off + sizeof shstrtab + 7) & ~size_t{7};
  std::vector<uint8_t> out(sh_off + 6 * sizeof(Elf64_Shdr));

  Elf64_Ehdr eh{};
  std::memcpy(eh.e_ident, ELFMAG, SELFMAG);
  eh.e_ident[EI_CLASS] = ELFCLASS64;
  eh.e_ident[EI_DATA] = ELFDATA2LSB;
  eh.e_ident[EI_VERSION] = EV_CURRENT;
  eh.e_type = ET_EXEC;
  eh.e_machine = aarch64 ? EM_AARCH64 : EM_X86_64;
  eh.e_version = EV_CURRENT;
  eh.e_entry = kBase + text_off;
  eh.e_phoff = sizeof(Elf64_Ehdr);
  eh.e_shoff = sh_off;
  eh.e_ehsize = sizeof(Elf64_Ehdr);
  eh.e_phentsize = sizeof(Elf64_Phdr);
  eh.e_phnum = 1;
  eh.e_shentsize = sizeof(Elf64_Shdr);
  eh.e_shnum = 6;
  eh.e_shstrndx = 5;
  put(out, 0, eh);

  Elf64_Phdr ph{};
  ph.p_type = PT_LOAD;
  ph.p_flags = PF_R | PF_X;
  ph.p_vaddr = ph.p_paddr = kBase;
  ph.p_filesz = ph.p_memsz = sh_off;
  ph.p_align = 0x1000;
  put(out, sizeof(Elf64_Ehdr), ph);

  // .text: the exact arm64 coro_startup signature (a no-op byte pattern on x86-64).
  const uint32_t trampoline[3] = {0xaa1403e0, 0xd63f0260, 0x17ffffff};
  std::memcpy(out.data() + text_off, trampoline, sizeof trampoline);
  if (n > 0) std::memcpy(out.data() + eh_off, cfi, n);

  Elf64_Sym sym{};
  sym.st_name = 1;
  sym.st_info = ELF64_ST_INFO(STB_GLOBAL, STT_FUNC);
  sym.st_shndx = 1;
  sym.st_value = kBase + text_off;
  sym.st_size = 12;
  put(out, sym_off + sizeof(Elf64_Sym), sym);
  std::memcpy(out.data() + str_off, strtab, sizeof strtab);
  std::memcpy(out.data() + shstr_off, shstrtab, sizeof shstrtab);

  auto section = [&](int i, uint32_t name, uint32_t type, uint64_t flags, size_t off, size_t size,
                     uint32_t link, uint64_t entsize, uint32_t info) {
    Elf64_Shdr sh{};
    sh.sh_name = name;
    sh.sh_type = type;
    sh.sh_flags = flags;
    sh.sh_addr = flags & SHF_ALLOC ? kBase + off : 0;
    sh.sh_offset = off;
    sh.sh_size = size;
    sh.sh_link = link;
    sh.sh_info = info;
    sh.sh_addralign = 8;
    sh.sh_entsize = entsize;
    put(out, sh_off + i * sizeof(Elf64_Shdr), sh);
  };
  section(1, 1, SHT_PROGBITS, SHF_ALLOC | SHF_EXECINSTR, text_off, text_size, 0, 0, 0);
  section(2, 7, SHT_PROGBITS, SHF_ALLOC, eh_off, n, 0, 0, 0);
  section(3, 17, SHT_SYMTAB, 0, sym_off, 2 * sizeof(Elf64_Sym), 4, sizeof(Elf64_Sym), 1);
  section(4, 25, SHT_STRTAB, 0, str_off, sizeof strtab, 0, 0, 0);
  section(5, 33, SHT_STRTAB, 0, shstr_off, sizeof shstrtab, 0, 0, 0);
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  std::vector<uint8_t> image = wrap(data[0] & 1, data + 1, size - 1);
  auto file = ljprof::elf::ElfFile::from_memory(image, "cfi-fuzz-input");
  if (!file.ok()) return 0;
  namespace cfi = ljprof::cfi;
  namespace luajit = ljprof::luajit;
  (void)cfi::list_fdes(**file);
  (void)luajit::find_interpreter_fde(**file);
  // The VM interval covers the fuzzed bytes themselves, so the sub-range patterns disassemble
  // them.
  luajit::VmInterval vm{kBase + 128, kBase + 192 + size - 1, "fuzz"};
  for (const auto& interval :
       {std::optional<luajit::VmInterval>{}, std::optional<luajit::VmInterval>{vm}}) {
    auto table = cfi::build_unwind_table(**file, luajit::unwind_overlays(**file, interval));
    if (!table.ok()) continue;
    auto rows = table->rows();
    for (size_t i = 1; i < rows.size(); ++i) {
      if (rows[i].pc_start <= rows[i - 1].pc_start) __builtin_trap();  // must be sorted
    }
    for (const auto& row : rows) {
      if (table->row_at(row.pc_start) != &row) __builtin_trap();
      (void)cfi::describe_row(row, table->arch());
    }
    auto cframe = luajit::derive_vm_cframe(*table, vm.begin, vm.end);
    if (cframe.ok()) (void)luajit::to_json(*cframe).dump();
    // The table cache's bytes read back to the same rows.
    auto back = cfi::UnwindTable::from_bytes(table->to_bytes());
    if (!back.ok() || back->rows().size() != rows.size()) __builtin_trap();
  }
  // Cache file bytes are input too (cfi/table_cache.h): any of them must be refused or read.
  (void)cfi::UnwindTable::from_bytes(std::span<const uint8_t>(data + 1, size - 1));
  return 0;
}
